"""The exercise build of the package (``ftcourse.course.withheld``): the course's answers are out of
the sandbox's reach by every spelling, and the exercise's given cells still import what they need."""

import subprocess
import sys

import nbformat
import pytest

from ftcourse.course import exercise, exercise_bert_base, withheld

STUDENT = exercise.student_path(exercise.SOLUTIONS_DIR / "05_exercise_bert_base.ipynb")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return withheld.build(exercise_bert_base.EXERCISE.withheld, tmp_path_factory.mktemp("exercise-package"))


def python(code: str, build) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter that imports ftcourse from ``build`` (its folder first on the path)."""
    return subprocess.run([sys.executable, "-c", code], cwd=build.parent, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})


def test_a_module_that_imports_a_withheld_one_is_withheld_too():
    plan = withheld.plan({"ftcourse.lora": withheld.ABSENT})
    assert plan["ftcourse.spans"] == withheld.ABSENT  # spans imports lora at its top level
    assert "ftcourse.costs" not in plan  # costs imports lora inside its functions only: it stays
    with pytest.raises(ValueError, match="no such module"):
        withheld.plan({"ftcourse.no_such_module": withheld.ABSENT})
    with pytest.raises(ValueError, match="expected 'absent' or 'constants'"):
        withheld.plan({"ftcourse.lora": "hidden"})


def test_a_constants_module_keeps_its_literals_and_no_function():
    source = '"""Doc."""\nfrom __future__ import annotations\nimport torch\nREGIMES = ("a", "b")\nLIMIT = 3\n' \
             'TABLE = torch.zeros(1)\n\ndef run_regime():\n    return 1\n'
    reduced = withheld.constants_only(source)
    namespace = {}
    exec(compile(reduced, "reduced", "exec"), namespace)
    assert namespace["REGIMES"] == ("a", "b") and namespace["LIMIT"] == 3 and namespace["__doc__"] == "Doc."
    assert "run_regime" not in namespace and "TABLE" not in namespace and "torch" not in namespace


def test_the_given_cells_import_everything_they_need_from_the_build(build):
    nb = nbformat.read(STUDENT, as_version=4)
    imports = "\n".join(line for cell in nb.cells if cell.cell_type == "code" for line in cell.source.splitlines()
                        if line.startswith(("import ", "from ")) and "ftcourse" in line)
    assert "from ftcourse.training import" in imports  # the given cells' imports were found
    done = python(imports + "\nimport ftcourse.course.evidence, ftcourse.course.guard\n"
                            "from ftcourse.regimes import REGIMES\nprint(experiments.paired({0: 1, 1: 2}, {0: 0, 1: 0}))",
                  build)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "beats" in done.stdout or "tie" in done.stdout


@pytest.mark.parametrize("spelling", [
    "from ftcourse.lora import add_lora",
    "import importlib; importlib.import_module('ftcourse.' + 'lo' + 'ra')",
    "import base64; exec(base64.b64decode(b'ZnJvbSBmdGNvdXJzZS5sb3JhIGltcG9ydCBhZGRfbG9yYQ=='))",
    "import ftcourse.regimes as r; vars(r)['run_regime']",
    "from ftcourse import experiments; experiments.train_run",
    "import runpy; runpy.run_path(__import__('ftcourse').__path__[0] + '/lora.py')",
])
def test_no_spelling_reaches_the_course_answers(build, spelling):
    done = python(spelling, build)
    assert done.returncode != 0
    assert ("not in the exercise's build of ftcourse" in done.stderr
            or "KeyError: 'run_regime'" in done.stderr), done.stderr[-1000:]
