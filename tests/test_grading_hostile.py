"""Hostile submissions, made from the student notebook and the solution's code, graded as a
class (``grade_folder``, smoke profile, sandboxed): each gets its clear status, no part passes
where it should not, nothing outside the sandbox changes, and the grader's memory stays
bounded. The solution, graded in the same class, still passes every part."""

import csv
import json
import os
import shutil
import threading
import uuid

import nbformat
import pytest

from ftcourse.course import cli, exercise, grading, sandbox
from ftcourse.config import REPO_ROOT

SOLUTION = exercise.SOLUTIONS_DIR / "05_exercise_bert_base.ipynb"
STUDENT = exercise.student_path(SOLUTION)
NAME = "05_exercise_bert_base.ipynb"
ENV = {"FTCOURSE_PROFILE": "smoke"}
TAG = uuid.uuid4().hex[:12]
#: Paths a submission tries to write outside the sandbox; none may exist afterwards.
OUTSIDE = {"home": os.path.expanduser(f"~/ftcourse-hostile-{TAG}"), "tmp": f"/tmp/ftcourse-hostile-{TAG}",
           "repo": str(REPO_ROOT / f"ftcourse-hostile-{TAG}")}

LINKS = {"link_dev_zero": "/dev/zero", "link_etc_shadow": "/etc/shadow", "link_solution": str(SOLUTION)}

TOP_LEVEL_TAMPERING = """\
import importlib, sys, types
import ftcourse.course.checks
for _name in dir(ftcourse.course.checks):
    if _name.startswith("check_"):
        setattr(ftcourse.course.checks, _name, lambda *args, **kwargs: {"lora": 294912, "percent": 0.27})
importlib.reload = lambda module: module
sys.modules["ftcourse.course.checks"] = types.SimpleNamespace(**vars(ftcourse.course.checks))
checks = types.SimpleNamespace(**{n: (lambda *a, **k: None) for n in dir(ftcourse.course.checks) if n.startswith("check_")})"""
IN_FUNCTION = {
    "patches_checks": ("add_lora", """\
def add_lora(encoder):
    import ftcourse.course.checks as c
    c.check_lora_on_bert_base = lambda f: {"lora": 294912, "total": 1, "percent": 0.27}
    c.check_lora_targets = lambda f: None
    return encoder""", "1 lora", "ftcourse.course.checks.check_lora_on_bert_base was replaced"),
    "replaces_sys_modules": ("summarize", """\
def summarize(accuracies):
    import sys, types
    fake = types.ModuleType("ftcourse.course.checks")
    fake.__dict__.update({n: (lambda *a, **k: None) for n in dir(sys.modules["ftcourse.course.checks"])})
    sys.modules["ftcourse.course.checks"] = fake
    return {"mean": 0.0, "std": 0.0, "range": 0.0}""", "5 seeds", "sys.modules['ftcourse.course.checks'] was replaced"),
    "patches_importlib_and_rebinds_checks": ("summarize", """\
def summarize(accuracies):
    global checks
    import importlib, types
    importlib.reload = lambda module: module
    checks = types.SimpleNamespace(check_seed_summary=lambda f: None, check_stability=lambda *a: None)
    return {"mean": 0.0, "std": 0.0, "range": 0.0}""", "5 seeds", "importlib.reload was replaced"),
}
ESCAPES = [
    f"open({OUTSIDE['home']!r}, 'w').write('escaped')",
    f"open({OUTSIDE['repo']!r}, 'w').write('escaped')",
    "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)",
    f"open({OUTSIDE['tmp']!r}, 'w').write('only in the sandbox')  # its private /tmp: works, stays inside",
]
FORK_BOMB = """\
import os, time
forked = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        forked += 1
except OSError:
    raise RuntimeError(f"fork bomb stopped after {forked} processes")"""
MEMORY_HOG = "held = []\nwhile True:\n    held.append(bytearray(256 * 2**20))"
FLOOD = "while True:\n    print('flood ' * 200)"
KILL = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"


def student():
    return nbformat.read(STUDENT, as_version=4)


def insert(nb, after: int, *sources):
    """``nb`` with code cells inserted after cell ``after`` (1: setup, 2: imports)."""
    nb.cells[after + 1:after + 1] = [nbformat.v4.new_code_cell(source) for source in sources]
    return nb


def answer(nb, name: str, source: str):
    """``nb`` with the stub cell defining ``name`` replaced by ``source``."""
    cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)
    cell.source = source
    return nb


def hostile_notebooks() -> dict:
    books = {
        "solution": nbformat.read(SOLUTION, as_version=4),
        "untouched": student(),
        "top_level_tampering": insert(student(), 2, TOP_LEVEL_TAMPERING),
        "escape": insert(student(), 2, *ESCAPES),
        "fork_bomb": insert(student(), 1, FORK_BOMB),
        "memory_hog": student(),
        "flood": insert(student(), 1, FLOOD),
        "kills_kernel": insert(student(), 1, KILL),
    }
    books["memory_hog"].cells.append(nbformat.v4.new_code_cell(MEMORY_HOG))  # last: the rest runs first
    for case, (name, source, _, _) in IN_FUNCTION.items():
        books[f"in_function_{case}"] = answer(student(), name, source)
    return books


class PeakRSS(threading.Thread):
    """The grader's (this process's) resident memory, sampled every 50 ms, in MiB."""

    def __init__(self):
        super().__init__(daemon=True)
        self.base = self.peak = self.rss()
        self.stop = threading.Event()

    @staticmethod
    def rss() -> float:
        return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

    def run(self):
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, self.rss())


@pytest.fixture(scope="module")
def graded(tmp_path_factory, bwrap):
    folder = tmp_path_factory.mktemp("class")
    for case, nb in hostile_notebooks().items():
        (folder / case).mkdir()
        nbformat.write(nb, folder / case / NAME)
    (folder / "not_json").mkdir()
    (folder / "not_json" / NAME).write_text("{ this is not a notebook")
    (folder / "other_exercise").mkdir()
    shutil.copy(REPO_ROOT / "notebooks" / "02_feature_readout.ipynb", folder / "other_exercise" / NAME)
    # Links a student hands in instead of a notebook: to a device, to a file only root may read, to the solution.
    for case, target in LINKS.items():
        (folder / case).mkdir()
        (folder / case / NAME).symlink_to(target)
    hashes = {path: grading.sha256(path) for path in folder.rglob("*.ipynb") if not path.is_symlink()}
    gradebook = tmp_path_factory.mktemp("book") / "gradebook"
    memory = PeakRSS()
    memory.start()
    try:
        results = grading.grade_folder(folder, gradebook, workers=2, timeout=240, env=ENV, progress=False)
    finally:
        memory.stop.set()
        memory.join()
    print(f"grader peak RSS growth while grading the class: {memory.peak - memory.base:.0f} MiB")
    print("\n".join(f"{r.student}: {r.status}, {r.seconds:.0f} s" for r in results))
    assert {path: grading.sha256(path) for path in folder.rglob("*.ipynb")
            if not path.is_symlink()} == hashes  # submissions untouched
    return {"rows": {r.student: r for r in results}, "folder": folder, "gradebook": gradebook,
            "memory": memory.peak - memory.base}


def row(graded, case):
    return graded["rows"][case]


def assert_nothing_passes(result):
    assert not any(result.parts().values()), grading.details(result)


def test_the_solution_passes_every_part(graded):
    solved = row(graded, "solution")
    assert solved.status == "ok", grading.details(solved)
    assert set(solved.marks().values()) == {"PASS"} and len(solved.marks()) == 5
    assert any(c.hidden for c in solved.checks)


def test_the_untouched_student_version_fails_cleanly(graded):
    untouched = row(graded, "untouched")
    assert untouched.status == "errors" and untouched.failing_cell.ename == "NotImplementedError"
    assert_nothing_passes(untouched)
    assert all(grading.NOT_DONE in c.message for c in untouched.checks), grading.details(untouched)


def test_top_level_tampering_never_reaches_the_verdicts(graded):
    """Patching ftcourse.course.checks, importlib.reload and sys.modules, and rebinding `checks`, at top level."""
    result = row(graded, "top_level_tampering")
    assert result.status == "errors", grading.details(result)  # the stubs: plain failures, nothing to review
    assert_nothing_passes(result)
    assert any(grading.NOT_DONE in c.message for c in result.checks)


@pytest.mark.parametrize("case", IN_FUNCTION)
def test_tampering_inside_an_answer_function_is_sent_for_review(graded, case):
    _, _, part, change = IN_FUNCTION[case]
    result = row(graded, f"in_function_{case}")
    assert result.status == grading.REVIEW, grading.details(result)
    assert result.marks()[part] == "REVIEW"
    assert_nothing_passes(result)
    assert any(change in c.message for c in result.checks if c.review), grading.details(result)
    if case == "patches_importlib_and_rebinds_checks":
        assert any("name 'checks' was rebound" in c.message for c in result.checks if c.review)


def test_writes_outside_and_the_network_are_refused_and_nothing_outside_changes(graded):
    result = row(graded, "escape")
    assert result.status == "errors"
    assert_nothing_passes(result)
    raised = {e.first_line.split("(")[0]: e.ename for e in result.cell_errors}
    assert raised["open"] in ("PermissionError", "FileNotFoundError", "OSError")
    assert sum(e.first_line.startswith("open(") for e in result.cell_errors) == 2  # home and repository
    assert any(e.ename == "OSError" and "unreachable" in e.evalue for e in result.cell_errors)
    assert not any(os.path.exists(path) for path in OUTSIDE.values())


def test_a_fork_bomb_is_bounded(graded):
    result = row(graded, "fork_bomb")
    assert result.status in ("errors", "kernel died"), grading.details(result)
    assert_nothing_passes(result)
    bomb = next(e for e in result.cell_errors if e.cell == 2)
    if bomb.ename == "RuntimeError":
        assert int(bomb.evalue.split()[4]) < sandbox.Limits().processes


def test_a_memory_hog_is_stopped_by_the_memory_limit(graded):
    result = row(graded, "memory_hog")
    assert result.status in ("errors", "kernel died"), grading.details(result)
    assert_nothing_passes(result)
    last = result.cell_errors[-1]
    assert last.first_line == "held = []" and last.ename in ("MemoryError", "DeadKernelError")


def test_an_output_flood_is_stopped_and_reported(graded):
    result = row(graded, "flood")
    assert result.status == "output flood" and result.failing_cell.cell == 2, grading.details(result)
    assert_nothing_passes(result)
    assert result.seconds < 120
    # The grader holds a reference model per worker while it judges (ftcourse.course.verdicts), one more
    # copy and its gradient for the descent check (one check at a time), and at most output_bytes of each
    # sandbox's stdout: a flood it buffered would run to gigabytes. The descent check took the class's
    # peak from under 1,024 MiB to 1,076 and 1,165 in two runs (issue 38), hence 1,536: a buffered flood
    # would still exceed it several times over.
    assert graded["memory"] < 1536, f"the grader grew by {graded['memory']:.0f} MiB"


def test_killing_the_kernel_non_json_and_another_exercise(graded):
    assert row(graded, "kills_kernel").status == "kernel died"
    assert row(graded, "not_json").status == "unreadable"
    other = row(graded, "other_exercise")
    assert other.status == "wrong exercise" and "not the exercise 05_exercise_bert_base" in other.checks[0].message
    for case in ("kills_kernel", "not_json", "other_exercise"):
        assert_nothing_passes(row(graded, case))


def test_links_to_a_device_a_secret_and_the_solution_are_refused_unread(graded):
    for case in LINKS:
        result = row(graded, case)
        assert result.status == "refused: not a regular file (symlink)", grading.details(result)
        assert result.sha256 == "" and result.seconds == 0
        assert_nothing_passes(result)


def test_the_gradebook_has_a_row_per_student_and_a_rerun_skips_graded_ones(graded, monkeypatch, capsys):
    rows = list(csv.DictReader(graded["gradebook"].with_suffix(".csv").open()))
    assert [r["student"] for r in rows] == sorted(graded["rows"])
    assert list(rows[0])[:8] == ["student", "exercise", "status", "1 lora", "2 regimes", "3 loop", "4 measure",
                                 "5 seeds"]
    by_student = {r["student"]: r for r in rows}
    assert [by_student["solution"][p] for p in ("1 lora", "2 regimes", "3 loop", "4 measure", "5 seeds")] == ["PASS"] * 5
    assert by_student["in_function_patches_checks"]["1 lora"] == "REVIEW"
    saved = json.loads(graded["gradebook"].with_suffix(".json").read_text())["submissions"]
    assert {s["student"]: s["status"] for s in saved} == {s: r.status for s, r in graded["rows"].items()}

    def must_not_grade(*args, **kwargs):
        raise AssertionError("an unchanged submission was graded again")

    monkeypatch.setattr(grading, "grade", must_not_grade)
    # The same grader as the class run's (the course's files may have been edited since: that regrades).
    assert len({s["grader"] for s in saved}) == 1
    monkeypatch.setattr(grading, "grader_version", lambda: saved[0]["grader"])
    again = grading.grade_folder(graded["folder"], graded["gradebook"], env=ENV, progress=False)
    assert {r.student: r.status for r in again} == {s: r.status for s, r in graded["rows"].items()}
    monkeypatch.undo()
    # --force regrades; a changed notebook is graded again (here, the two that need no kernel).
    small = graded["folder"].parent / "small"
    for case in ("not_json", "other_exercise"):
        shutil.copytree(graded["folder"] / case, small / case)
    book = graded["gradebook"].parent / "small"
    assert cli.main(["grade", str(small), "--gradebook", str(book), "--profile", "smoke"]) == 1
    calls = []
    real = grading.grade
    monkeypatch.setattr(grading, "grade", lambda *a, **k: calls.append(a) or real(*a, **k))
    monkeypatch.setattr(grading, "grader_version", lambda: "pinned")  # an edit elsewhere must not regrade here
    cli.main(["grade", str(small), "--gradebook", str(book), "--profile", "smoke"])
    calls.clear()
    cli.main(["grade", str(small), "--gradebook", str(book), "--profile", "smoke"])
    assert calls == []
    (small / "not_json" / NAME).write_text("{ still not a notebook")
    cli.main(["grade", str(small), "--gradebook", str(book), "--profile", "smoke"])
    assert len(calls) == 1
    cli.main(["grade", str(small), "--gradebook", str(book), "--profile", "smoke", "--force"])
    assert len(calls) == 3
    assert "gradebook:" in capsys.readouterr().out
