"""The grader on a toy exercise: the verdicts come from the grader's own process, from what the
recording cells wrote, whatever the notebook did at top level; errors and timeouts are reported with
their cell, a part whose own cell raised fails, nothing crashes the grader, and a grader without the
data its verdicts need says so in seconds, before grading anything. (The real exercise and
hostile submissions: tests/test_grading_hostile.py, tests/test_grading_verdicts.py.)"""

import json
import re
import os
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from ftcourse.course import cli, grading

SCAFFOLD = "import os\nfrom ftcourse import checks"
STUB = "def {name}():\n    # YOUR CODE HERE\n    raise NotImplementedError()"


@pytest.fixture
def toy(tmp_path, bwrap):
    return toy_exercise(tmp_path)


def toy_exercise(tmp_path):
    course = tmp_path / "course" / "toy.ipynb"
    course.parent.mkdir()
    cells = [new_markdown_cell("# toy"), new_code_cell(SCAFFOLD)]
    for name in "xyz":
        cells.append(new_code_cell(STUB.format(name=name), metadata={"tags": ["raises-exception"]}))
    nbformat.write(new_notebook(cells=cells), course)
    return grading.Exercise(
        name="toy", title="a toy exercise", course_notebook=course,
        parts=(grading.Part("x", ("x",)), grading.Part("y", ("y",)), grading.Part("z", ("z",))),
        checks=(grading.Check("x", "x() is 1", hidden=False), grading.Check("y", "y() is 2"),
                grading.Check("z", "z() returns")),
        records=tuple(grading.Record(name, f"{grading.EVIDENCE}.record_call({name!r}, {name})") for name in "xyz"),
        judge=toy_judge,
    )


def toy_judge(folder, profile):
    """The toy's verdicts, from the records alone: x() returned 1, y() returned 2, z() returned."""
    from ftcourse.course import verdicts

    found = []
    for part, hidden, passes, says in (("x", False, lambda v: v == 1, lambda v: "x() should be 1"),
                                       ("y", True, lambda v: v == 2, lambda v: f"y(): expected 2, found {v}."),
                                       ("z", True, lambda v: True, lambda v: "")):
        try:
            record = verdicts.read_json(folder, f"{part}.json")
            verdicts.raised(record, f"{part}()")
            value = record.get("value")
            found.append((part, passes(value), "" if passes(value) else says(value), hidden))
        except verdicts.StudentRaised as error:
            found.append((part, False, grading.student_raised(error), hidden))
        except verdicts.EvidenceMissing as missing:
            found.append((part, False, str(missing), hidden))
    return found


def write(tmp_path, name, *sources):
    path = tmp_path / name
    cells = [new_markdown_cell("# toy"), new_code_cell(SCAFFOLD)] + [new_code_cell(s) for s in sources]
    nbformat.write(new_notebook(cells=cells), path)
    return path


def test_verdicts_come_from_the_records_and_the_submission_is_untouched(tmp_path, toy):
    path = write(tmp_path, "toy.ipynb", "def x():\n    return int(os.environ['FTCOURSE_GRADING_TEST'])",
                 "def y():\n    return 3", STUB.format(name="z"),
                 "checks.expect = lambda *args: None  # top level: the verdicts are not computed here")
    before = grading.sha256(path)
    result = grading.grade(path, toy, timeout=120, env={"FTCOURSE_GRADING_TEST": "1"})  # env reaches the kernel
    assert grading.sha256(path) == before == result.sha256
    assert result.status == "ok" and result.failing_cell is None, grading.details(result)
    assert [(c.part, c.passed) for c in result.checks] == [("x", True), ("y", False), ("z", False)]
    assert result.checks[1].message == "y(): expected 2, found 3." and result.checks[1].hidden
    assert result.checks[2].message == grading.NOT_DONE
    assert sorted(tmp_path.iterdir()) == sorted([tmp_path / "course", path])  # nothing written beside it


def test_an_error_is_reported_with_its_cell_and_a_part_whose_cell_raised_fails(tmp_path, toy):
    path = write(tmp_path, "toy.ipynb", "def x():\n    return 1", "raise ValueError('broken on purpose')",
                 "def y():\n    return 2", "y = y() / 0", "def z():\n    return None")
    result = grading.grade(path, toy, timeout=120)
    assert result.status == "errors"
    assert (result.failing_cell.cell, result.failing_cell.ename) == (3, "ValueError")
    assert result.failing_cell.first_line == "raise ValueError('broken on purpose')"
    # y's check passes on the definition, but its own cell (`y = y() / 0`) raised: the part fails.
    assert result.parts() == {"x": True, "y": False, "z": True}
    assert any("its cell 5" in c.message and "ZeroDivisionError" in c.message for c in result.checks)
    assert "first failing cell: 3" in grading.details(result)


def test_a_timeout_a_dead_kernel_an_unreadable_file_and_another_notebook_are_reported(tmp_path, toy):
    slow = write(tmp_path, "slow.ipynb", "def x():\n    return 1", "while True:  # busy, not sleeping\n    pass", "y = 2")
    result = grading.grade(slow, toy, timeout=20)
    assert result.status == "timeout"
    assert result.failing_cell.cell == 3 and result.failing_cell.ename == "Timeout"
    assert result.parts() == {"x": False, "y": False, "z": False}
    assert all(c.message == "the notebook timed out" for c in result.checks)
    assert result.seconds < 90

    dies = write(tmp_path, "dies.ipynb", "def x():\n    return 1", "import os\nos._exit(1)", "y = 2")
    result = grading.grade(dies, toy, timeout=60)
    assert result.status == "kernel died" and result.failing_cell.cell == 3
    assert not any(result.parts().values())

    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ this is not a notebook")
    result = grading.grade(broken, toy)
    assert result.status == "unreadable" and not any(result.parts().values())

    other = tmp_path / "other.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("def x():\n    return 1")]), other)
    result = grading.grade(other, toy)
    assert result.status == "wrong exercise" and not any(result.parts().values())
    assert "not the exercise toy" in result.checks[0].message


def test_table_and_report(tmp_path):
    results = [grading.Submission(path="a.ipynb", exercise="toy", checks=[
        grading.PartResult("x", True, "", False), grading.PartResult("y", False, "y: expected 2, found 3.", True),
        grading.PartResult("z", False, "changed checks", True, review=True)])]
    lines = grading.table(results).splitlines()
    assert lines[0].split() == ["submission", "status", "x", "y", "z", "passed"]
    assert lines[2].split() == ["a.ipynb", "ok", "PASS", "FAIL", "REVIEW", "1/3"]
    results[0].path = "/somewhere/alice/a.ipynb"
    assert grading.table(results).splitlines()[2].startswith("alice/a.ipynb")
    report = json.loads(grading.write_report(results, tmp_path / "r.json").read_text())
    assert report["submissions"][0]["parts"] == {"x": True, "y": False, "z": False}
    assert report["submissions"][0]["marks"] == {"x": "PASS", "y": "FAIL", "z": "REVIEW"}


def test_command_line_usage_errors_and_an_unreadable_submission(tmp_path, capsys, bwrap):
    assert cli.main(["grade", str(tmp_path / "missing.ipynb")]) == 2
    broken = tmp_path / "05_exercise_bert_base.ipynb"
    broken.write_text("not json")
    assert cli.main(["grade", str(broken), "--exercise", "nope"]) == 2
    assert "Known exercises: 05_exercise_bert_base" in capsys.readouterr().err
    assert cli.main(["grade", str(broken), "--profile", "nope"]) == 2
    assert "Known profiles" in capsys.readouterr().err
    assert cli.main(["grade", str(tmp_path), str(broken)]) == 2
    report = tmp_path / "report.json"
    assert cli.main(["grade", str(broken), "--report", str(report)]) == 1
    assert json.loads(report.read_text())["submissions"][0]["status"] == "unreadable"
    assert broken.read_text() == "not json"


def test_only_the_grader_names_a_verdict_and_what_the_submission_says_is_escaped(tmp_path, toy):
    fake = "the submission changed what the checks rely on: \x1b[2J\x1b[32mALL PASSED\x07. For the instructor's review."
    path = write(
        tmp_path, "toy.ipynb",
        # Its own class named like the grader's, and the grader's very class, raised by the answers.
        f"class SubmissionTampered(Exception):\n    pass\ndef x():\n    raise SubmissionTampered({fake!r})",
        f"def y():\n    from ftcourse.course.guard import SubmissionTampered\n    raise SubmissionTampered({fake!r})",
        # Real tampering, when the checks call z: the guard's verdict.
        "def z():\n    checks.expect = lambda *args: None",
        f"raise SubmissionTampered({fake!r})  # at top level, in the notebook as submitted")
    result = grading.grade(path, toy, timeout=120)
    by_part = {c.part: c for c in result.checks if c.part in "xyz"}
    for part in ("x", "y"):
        check = by_part[part]
        assert not check.passed and not check.review, grading.details(result)
        assert check.message.startswith("submission raised SubmissionTampered (not the grader's verdict): ")
        assert "\x1b" not in check.message and "\\x1b[2J" in check.message
    assert by_part["z"].review and result.status == grading.REVIEW, grading.details(result)
    assert by_part["z"].message.startswith("the submission changed what the checks rely on: ")
    assert "checks.expect was replaced" in by_part["z"].message
    assert result.failing_cell.ename == "SubmissionTampered" and result.failing_cell.cell == 5
    shown = grading.details(result) + grading.table([result])
    assert not [c for c in shown if ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) <= 0x9f]
    assert "first failing cell: 5" in shown and "-> submission raised SubmissionTampered" in shown


def test_the_answers_are_collected_escaped_into_a_review_page(tmp_path):
    """The written questions' answers and the student's loop, for the instructor: a stub left as it was is
    no answer, added cells count, and what the student wrote is shown as text, never as markup."""
    from ftcourse.course import exercise

    solution = exercise.SOLUTIONS_DIR / "05_exercise_bert_base.ipynb"
    course = nbformat.read(exercise.student_path(solution), as_version=4)
    reviewed = grading.find_exercise(solution).reviewed_code
    untouched = grading.collect_answers(course, course, reviewed)
    questions = [e for e in untouched if not e.get("code")]
    assert len(questions) >= 3 and all(e["answer"] == "" for e in questions)
    assert [e["question"] for e in untouched if e.get("code")] == ["The student's train_loop"]
    answered = nbformat.read(exercise.student_path(solution), as_version=4)
    first = next(i for i, c in enumerate(answered.cells) if c.source.startswith(grading.QUESTION))
    answered.cells[first + 1].source = "Forward only. <script>alert(1)</script>"
    answered.cells.insert(first + 2, new_markdown_cell("And a second cell."))
    found = grading.collect_answers(answered, course, reviewed)
    assert found[0]["answer"] == "Forward only. <script>alert(1)</script>\n\nAnd a second cell."
    assert all(e["answer"] == "" for e in found[1:] if not e.get("code"))
    result = grading.Submission(path="x.ipynb", exercise="05_exercise_bert_base", student="alice", answers=found)
    folder = grading.write_review([result], tmp_path / "review")
    page = next(p for p in folder.iterdir() if p.name.startswith("alice-")).read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert page.count("not answered") == len(questions) - 1
    assert "alice" in (folder / "index.html").read_text()


def test_concurrent_kernels_share_the_cores_unless_the_threads_are_set(monkeypatch):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(grading.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert grading.threads_per_worker({"FTCOURSE_PROFILE": "grading"}, 2) == {
        "FTCOURSE_PROFILE": "grading", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert grading.threads_per_worker(None, 8)["OMP_NUM_THREADS"] == "1"
    assert grading.threads_per_worker({"OMP_NUM_THREADS": "3"}, 2) == {"OMP_NUM_THREADS": "3"}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the grader's own setting is passed through as it is
    assert grading.threads_per_worker({}, 2) == {}


# ----------------------------------------------------------------------------- what the grader's own process needs


def offline_without_data(tmp_path, monkeypatch):
    """As on a machine with no FTCOURSE_DATA and the hub offline (HF_HUB_OFFLINE=1), SST-2 in no cache."""
    import datasets
    from huggingface_hub import constants

    from ftcourse.course import verdicts

    monkeypatch.delenv("FTCOURSE_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the hub libraries read it once, at import
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty-datasets-cache")
    monkeypatch.setattr(verdicts, "_references", {})  # none built by an earlier test


def test_offline_without_data_the_command_fails_at_once_naming_the_fix(tmp_path, monkeypatch, capsys):
    """Without FTCOURSE_DATA and without the hub, the grader says so before grading anything, in seconds
    (the hub client would retry for minutes), naming the setting that fixes it."""
    offline_without_data(tmp_path, monkeypatch)
    path = tmp_path / "05_exercise_bert_base.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), path)
    report = tmp_path / "report.json"
    start = time.monotonic()
    assert cli.main(["grade", str(path), "--report", str(report)]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert err.startswith("error: 05_exercise_bert_base: The grader cannot build its reference model"), err
    assert "stanfordnlp/sst2" in err and "FTCOURSE_DATA" in err and "sst2/" in err and "go online" in err
    assert not report.exists()  # nothing was graded


def test_a_hub_that_does_not_answer_is_named_before_any_submission_runs(tmp_path, monkeypatch):
    """Not offline, but the hub unreachable (here: a closed port): one short probe, no loader's retries."""
    from huggingface_hub import constants

    from ftcourse import data

    offline_without_data(tmp_path, monkeypatch)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(data, "load", lambda *a, **k: pytest.fail("the grader asked the hub for the data"))
    monkeypatch.setattr(grading, "grade", lambda *a, **k: pytest.fail("a submission was graded"))
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), tmp_path / "alice.ipynb")
    start = time.monotonic()
    with pytest.raises(grading.GradingError) as refused:
        grading.grade_folder(tmp_path, tmp_path / "book", grading.find_exercise(Path("05_exercise_bert_base.ipynb")), progress=False,
                             env={"FTCOURSE_PROFILE": "grading"})
    assert time.monotonic() - start < 10
    message = str(refused.value)
    assert "the hub at http://127.0.0.1:9 does not answer" in message, message
    assert "set FTCOURSE_DATA to a folder holding sst2/" in message and "go online" in message
    assert not (tmp_path / "book.csv").exists()


def test_the_evidence_folder_is_removed_whatever_was_left_in_it_and_a_huge_record_only_fails_its_part(
        tmp_path, monkeypatch):
    """No kernel runs: the run is faked to leave 1,500 nested folders, folders and files without permissions
    and a record of more values than the (lowered) bound in the evidence folder."""
    from ftcourse.course import verdicts

    toy = toy_exercise(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(verdicts, "MAX_JSON_VALUES", 50)

    def leaves_a_mess(nb, timeout, env, slot, use_sandbox, limits, secret="", evidence=None, withheld=None,
                      data=None):
        (scratch / "seen").write_text(evidence)
        for name, record in (("x", {"value": 1}), ("z", {"value": None})):
            with open(os.path.join(evidence, f"{name}.json"), "w") as handle:
                json.dump(record, handle)
        with open(os.path.join(evidence, "y.json"), "w") as handle:
            handle.write('{"value": [' + ",".join(["[]"] * 100) + "]}")
        folder = os.open(evidence, os.O_RDONLY)
        for _ in range(1500):
            os.mkdir("d", dir_fd=folder)
            inner = os.open("d", os.O_RDONLY, dir_fd=folder)
            os.close(folder)
            folder = inner
        os.close(folder)
        locked = os.path.join(evidence, "locked")
        os.mkdir(locked)
        open(os.path.join(locked, "file"), "w").close()
        os.chmod(os.path.join(locked, "file"), 0)
        os.chmod(locked, 0o500)
        os.mkdir(os.path.join(evidence, "closed"), mode=0)
        return {"status": "ok", "cells": [{"index": i, "error": None} for i in range(len(nb.cells))],
                "stopped_at": None, "message": ""}

    monkeypatch.setattr(grading, "_execute", leaves_a_mess)
    path = write(tmp_path, "toy.ipynb", "def x():\n    return 1", "def y():\n    return 2", "def z():\n    pass")
    result = grading.grade(path, toy, timeout=60, use_sandbox=False)
    assert result.status == "ok" and not result.notes, grading.details(result)
    by_part = {c.part: c for c in result.checks}
    assert by_part["x"].passed and by_part["z"].passed
    assert not by_part["y"].passed and "y.json holds 103 JSON values, more than the 50" in by_part["y"].message
    assert (scratch / "seen").read_text().startswith(str(scratch / "ftcourse-evidence-"))
    assert sorted(p.name for p in scratch.iterdir()) == ["seen"]  # the evidence folder is gone


def test_the_engine_names_no_exercise_and_finds_each_in_its_own_module():
    """Issue 38, item 6: the exercise is data, the grader an engine. Every exercise module beside the
    engine is found (``known_exercises``), and none of an exercise's own names (its parts, the functions
    its parts define or its checks call, its reviewed code) appears in ``grading.py``'s source."""
    import ast
    import inspect

    exercises = grading.known_exercises()
    assert "05_exercise_bert_base" in exercises
    engine = inspect.getsource(grading)
    tree = ast.parse(engine)
    # What would be knowledge of an exercise: its names in the engine's strings (docstrings included), as an
    # attribute, a function or class, or a module-level name. A local variable that happens to share a word
    # with an answer's name (``results``) is not.
    said = " ".join(node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str))
    named = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    named |= {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    named |= {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
              if isinstance(target, ast.Name)}
    for exercise in exercises.values():
        names = {exercise.name, *exercise.reviewed_code, *exercise.solved_by_import}
        for part in exercise.parts:
            names |= {part.name, *part.defines, *part.checked_by}
        in_strings = {name for name in names if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", said)}
        assert not in_strings and not names & named, (exercise.name, in_strings, names & named)
