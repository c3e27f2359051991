"""The grader: runs notebooks in a fresh kernel on a copy, reports errors and timeouts
with the failing cell, runs visible and hidden checks, and never crashes."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from ftcourse import cli, exercise, grading

TOY = grading.Exercise(
    name="toy",
    title="a toy exercise",
    checks=(
        grading.Check("x", "assert x == 1, 'x should be 1'", hidden=False),
        grading.Check("y", "checks.expect(y == 2, 'y', 2, y)"),
        grading.Check("z", "z()"),
    ),
)


def write(tmp_path, name, *sources):
    path = tmp_path / name
    nbformat.write(new_notebook(cells=[new_markdown_cell("# toy")] + [new_code_cell(s) for s in sources]), path)
    return path


def test_checks_run_in_the_notebooks_kernel_and_the_submission_is_untouched(tmp_path):
    path = write(tmp_path, "toy.ipynb", "import os\nx = int(os.environ['FTCOURSE_GRADING_TEST'])", "y = 3",
                 "def z():\n    raise NotImplementedError()")
    before = grading.sha256(path)
    result = grading.grade(path, TOY, timeout=120, env={"FTCOURSE_GRADING_TEST": "1"})  # env reaches the kernel
    assert grading.sha256(path) == before == result.sha256
    assert result.status == "ok" and result.failing_cell is None
    assert [(c.part, c.passed) for c in result.checks] == [("x", True), ("y", False), ("z", False)]
    assert result.checks[1].message == "y: expected 2, found 3." and result.checks[1].hidden
    assert result.checks[2].message == grading.NOT_DONE
    assert list(tmp_path.iterdir()) == [path]  # nothing written beside the submission


def test_an_error_is_reported_with_its_cell_and_later_cells_still_run(tmp_path):
    path = write(tmp_path, "toy.ipynb", "x = 1", "raise ValueError('broken on purpose')", "y = 2", "z = print")
    result = grading.grade(path, TOY, timeout=120)
    assert result.status == "errors"
    assert (result.failing_cell.cell, result.failing_cell.ename) == (2, "ValueError")
    assert result.failing_cell.first_line == "raise ValueError('broken on purpose')"
    assert result.parts() == {"x": True, "y": True, "z": True}
    assert "first failing cell: 2" in grading.details(result)


def test_a_timeout_a_dead_kernel_and_an_unreadable_file_are_reported_not_raised(tmp_path):
    slow = write(tmp_path, "slow.ipynb", "x = 1", "import time\ntime.sleep(60)", "y = 2")
    result = grading.grade(slow, TOY, timeout=8)
    assert result.status == "timeout"
    assert result.failing_cell.cell == 2 and result.failing_cell.ename == "Timeout"
    assert result.parts() == {"x": False, "y": False, "z": False}
    assert all(c.message == "the notebook timed out" for c in result.checks)
    assert result.seconds < 60

    dies = write(tmp_path, "dies.ipynb", "x = 1", "import os\nos._exit(1)", "y = 2")
    result = grading.grade(dies, TOY, timeout=60)
    assert result.status == "kernel died" and result.failing_cell.cell == 2
    assert not any(result.parts().values())

    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ this is not a notebook")
    result = grading.grade(broken, TOY)
    assert result.status == "unreadable" and not any(result.parts().values())


def test_table_and_report(tmp_path):
    results = [grading.Submission(path="a.ipynb", exercise="toy", checks=[
        grading.PartResult("x", True, "", False), grading.PartResult("y", False, "y: expected 2, found 3.", True)])]
    lines = grading.table(results).splitlines()
    assert lines[0].split() == ["submission", "status", "x", "y", "passed"]
    assert lines[2].split() == ["a.ipynb", "ok", "PASS", "FAIL", "1/2"]
    results[0].path = "/somewhere/alice/a.ipynb"
    assert grading.table(results).splitlines()[2].startswith("alice/a.ipynb")
    report = json.loads(grading.write_report(results, tmp_path / "r.json").read_text())
    assert report["submissions"][0]["parts"] == {"x": True, "y": False}


def test_command_line_usage_errors_and_an_unreadable_submission(tmp_path, capsys):
    assert cli.main(["grade", str(tmp_path / "missing.ipynb")]) == 2
    broken = tmp_path / "05_exercise_bert_base.ipynb"
    broken.write_text("not json")
    assert cli.main(["grade", str(broken), "--exercise", "nope"]) == 2
    assert "Known exercises: 05_exercise_bert_base" in capsys.readouterr().err
    assert cli.main(["grade", str(broken), "--profile", "nope"]) == 2
    assert "Known profiles" in capsys.readouterr().err
    report = tmp_path / "report.json"
    assert cli.main(["grade", str(broken), "--report", str(report)]) == 1
    assert json.loads(report.read_text())["submissions"][0]["status"] == "unreadable"
    assert broken.read_text() == "not json"


@pytest.mark.slow
def test_the_solution_passes_and_the_untouched_student_version_fails_cleanly(tmp_path):
    """The real exercise, in the smoke profile (seconds of training, numbers meaningless)."""
    solution = exercise.SOLUTIONS_DIR / "05_exercise_bert_base.ipynb"
    student = exercise.student_path(solution)
    before = grading.sha256(solution), grading.sha256(student)
    env = {"FTCOURSE_PROFILE": "smoke"}
    solved = grading.grade(solution, timeout=600, env=env)
    assert solved.status == "ok", grading.details(solved)
    assert all(solved.parts().values()), grading.details(solved)
    assert any(c.hidden for c in solved.checks)

    untouched = grading.grade(student, timeout=300, env=env)
    assert untouched.status == "errors"
    assert untouched.failing_cell.ename == "NotImplementedError"
    assert not any(untouched.parts().values())
    # Each part fails with a reason a student can act on: the stub, or what was expected and found.
    assert all(c.message == grading.NOT_DONE or ("expected" in c.message and "found" in c.message)
               for c in untouched.checks), grading.details(untouched)
    assert sum(c.message == grading.NOT_DONE for c in untouched.checks if not c.hidden) >= 4
    assert (grading.sha256(solution), grading.sha256(student)) == before
