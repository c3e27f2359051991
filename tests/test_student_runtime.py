"""A student's runtime keeps its own torch: the wheel declares compatible ranges, not exact pins.

A Colab runtime (or a student's own environment) already holds a torch built for its CUDA and a
transformers of its own. The notebooks' first cell installs the course into it without the
course's constraints, so an exact pin would make pip replace that torch: gigabytes, and maybe a
torch that does not match the driver. This test builds such a runtime: a fresh virtualenv holding
a CUDA build of torch of another version than the course's pin (the machine keeps one, with its
NVIDIA libraries, in its local package mirror) and the oldest transformers the ranges allow. It
installs the wheel there with plain pip, no constraints, asserts that pip kept both, and runs a
lesson's code from that environment at the smoke profile.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ftcourse.config import REPO_ROOT

pytestmark = pytest.mark.slow

#: What the simulated runtime holds before the course is installed: a torch other than the course's
#: pin (a CUDA build, as on Colab) and transformers at the lower bound of the course's range.
PREINSTALLED = {"torch": "2.14.1", "transformers": "5.17.0"}

LESSON = textwrap.dedent("""
    import sys, torch, transformers, ftcourse
    from ftcourse import data, heads, models, training
    assert not ftcourse.__file__.startswith(sys.argv[1]), ftcourse.__file__
    profile = ftcourse.setup(verbose=False)
    # Lesson 1's composition and one step of the transfer recipe, on the course's raw encoder.
    tokenizer = models.load_tokenizer("raw_encoder", profile)
    encoder = models.load_raw_encoder(profile)
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, num_labels=2))
    batch = tokenizer(["a gripping, funny film", "a dull film"], return_tensors="pt", padding=True)
    loss = model(**batch, labels=torch.tensor([1, 0]))["loss"]
    loss.backward()
    print("torch", torch.__version__, "transformers", transformers.__version__, "loss", round(float(loss), 3))
""")


def _wheel(source: Path, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, cwd=out.parent)
    (wheel,) = out.glob("ftcourse-*.whl")
    return wheel


def _pip(python: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], text=True,
                          capture_output=True, **kwargs)


def planned_replacements(python: Path, wheel: Path, preinstalled: dict) -> dict:
    """What ``pip install WHEEL`` (no constraints) would do to the preinstalled packages, without
    doing it: ``{name: version pip would install instead}``, empty when it keeps them all."""
    report = wheel.parent / "plan.json"
    run = _pip(python, "install", "--dry-run", "--quiet", "--report", str(report), str(wheel))
    assert run.returncode == 0, run.stderr[-3000:]
    planned = {item["metadata"]["name"].lower(): item["metadata"]["version"]
               for item in json.loads(report.read_text())["install"]}
    return {name: planned[name] for name in preinstalled if name in planned}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """A fresh virtualenv holding ``PREINSTALLED``, as a Colab runtime holds its own torch."""
    root = tmp_path_factory.mktemp("runtime")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    run = _pip(python, "install", "--quiet", *(f"{name}=={version}" for name, version in PREINSTALLED.items()))
    if run.returncode != 0:
        pytest.fail(f"could not build the simulated runtime ({PREINSTALLED}): {run.stderr[-2000:]}")
    yield root, python
    shutil.rmtree(root, ignore_errors=True)  # gigabytes of CUDA libraries


def _versions(python: Path) -> dict:
    run = _pip(python, "list", "--format", "json")
    return {item["name"].lower(): item["version"] for item in json.loads(run.stdout)}


def test_the_wheel_keeps_the_runtime_s_torch_and_runs_a_lesson_there(runtime):
    root, python = runtime
    wheel = _wheel(REPO_ROOT, root / "wheel")
    assert planned_replacements(python, wheel, PREINSTALLED) == {}, "pip would replace the runtime's own packages"
    run = _pip(python, "install", "--quiet", str(wheel))  # what the notebooks' first cell does: no constraints
    assert run.returncode == 0, run.stderr[-3000:]
    versions = _versions(python)
    assert {name: versions[name] for name in PREINSTALLED} == PREINSTALLED  # kept, not replaced
    lesson = subprocess.run([str(python), "-c", LESSON, str(REPO_ROOT)], cwd=root, capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(root), "HF_HUB_OFFLINE": "1",
                                 "FTCOURSE_PROFILE": "smoke", "FTCOURSE_CACHE": str(root / "cache")})
    assert lesson.returncode == 0, lesson.stderr[-3000:]
    assert f"torch {PREINSTALLED['torch']}" in lesson.stdout and f"transformers {PREINSTALLED['transformers']}" in lesson.stdout


def test_a_range_that_excludes_the_runtime_s_torch_is_caught(runtime, tmp_path):
    """The check above can fail: the course's package with a torch range that leaves out the
    runtime's 2.14.1 (the old exact pin, 2.13.0) would have pip replace it."""
    _, python = runtime
    source = tmp_path / "source"
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "notebooks", "solutions",
                                                                     "tests", "bench", "book", "*.egg-info",
                                                                     "__pycache__"))
    pyproject = source / "pyproject.toml"
    text, count = re.subn(r'"torch[^"]*"', '"torch==2.13.0"', pyproject.read_text(), count=1)
    assert count == 1
    pyproject.write_text(text)
    wheel = _wheel(source, tmp_path / "wheel")
    replaced = planned_replacements(python, wheel, PREINSTALLED)
    assert set(replaced) == {"torch"} and replaced["torch"].startswith("2.13.0"), replaced


def test_every_runtime_dependency_is_a_range_and_the_builds_pin_a_version_inside_it():
    """The wheel declares ranges (this file's runtime keeps its torch); constraints.txt pins each
    exactly, inside its range, for the course's own builds (make install, CI)."""
    import tomllib

    from packaging.requirements import Requirement

    requirements = [Requirement(r) for r in tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    pins = dict(line.split("==") for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    pins = {Requirement(name).name.lower().replace("_", "-"): version.strip() for name, version in pins.items()}
    for requirement in requirements:
        operators = {spec.operator for spec in requirement.specifier}
        assert ">=" in operators and "<" in operators and "==" not in operators, requirement
        pinned = pins[requirement.name.lower().replace("_", "-")]
        assert requirement.specifier.contains(pinned, prereleases=True), (requirement, pinned)
    assert PREINSTALLED["torch"] != pins["torch"]  # the runtime's torch is not the one the builds pin
