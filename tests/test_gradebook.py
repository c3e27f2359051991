"""The grader's own file handling, without a sandbox: a submission that is not a regular file or
is too big is refused unread, the gradebook is written as each submission finishes, the cache
of grades depends on the grader's version, every string a submission controls is escaped
in the table, the CSV, the JSON and the review pages, an evidence record is parsed only within
caps, and an evidence folder is removed whatever was left in it. (Grading itself is faked here:
no kernel runs.)"""

import csv
import json
import os
import shutil
import stat
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

import ftcourse
from ftcourse.course import grading

EXERCISE = grading.Exercise(name="toy", title="toy", checks=(grading.Check("x", "x()"), grading.Check("y", "y()")))


def notebook(path: Path, source="def x():\n    return 1") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), path)
    return path


class Crash(BaseException):
    """Stands for the grader's process dying (killed, out of memory) in the middle of a class."""


class FakeGrade:
    """Stands for grading.grade: reads the submission the way the grader does, passes every part."""

    def __init__(self, crash_on=None, bug_on=None):
        self.paths, self.crash_on, self.bug_on = [], crash_on, bug_on

    def __call__(self, path, exercise=None, **kwargs):
        path = Path(path)
        if path.parent.name == self.crash_on:
            raise Crash("the grader's process dies here")
        if path.parent.name == self.bug_on:
            raise RuntimeError("a bug in the grader")
        info = os.lstat(path)
        assert stat.S_ISREG(info.st_mode), f"graded {path}, which is not a regular file"
        self.paths.append(path)
        return grading.Submission(path=str(path), exercise=exercise.name, sha256=grading.sha256(path),
                                  grader=grading.grader_version(), sandboxed=kwargs.get("use_sandbox", True),
                                  profile=os.environ.get("FTCOURSE_PROFILE") or "offline",
                                  checks=[grading.PartResult(c.part, True, "", c.hidden) for c in exercise.checks])


def rows(gradebook: Path) -> list[dict]:
    return list(csv.DictReader(gradebook.with_suffix(".csv").open(newline="")))


# ----------------------------------------------------------------------------- 1. what the grader reads


@pytest.mark.parametrize("cap", [16, 100])
def test_read_submission_reads_within_the_cap_even_when_the_size_lies(tmp_path, monkeypatch, cap):
    exact = tmp_path / "exact.ipynb"
    exact.write_bytes(b"x" * 16)
    assert grading.read_submission(exact, cap=16) == b"x" * 16
    with pytest.raises(grading.Refused, match="over the cap"):
        grading.read_submission(exact, cap=15)
    # /proc files are regular files whose size says 0: the cap must hold while reading, too.
    read = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    if cap == 16:
        with pytest.raises(grading.Refused, match="over the cap"):
            grading.read_submission("/proc/self/maps", cap=cap)
        assert sum(read) <= cap + 1
    else:
        assert grading.read_submission("/proc/self/maps", cap=10**7)


def test_links_fifos_devices_and_big_files_are_refused_unread(tmp_path):
    solution = notebook(tmp_path / "solution.ipynb")
    cases = {"symlink": tmp_path / "link.ipynb", "FIFO": tmp_path / "fifo.ipynb"}
    cases["symlink"].symlink_to(solution)
    os.mkfifo(cases["FIFO"])
    for kind, path in cases.items():
        with pytest.raises(grading.Refused, match=rf"refused: not a regular file \({kind}\)"):
            grading.read_submission(path)
        result = grading.grade(path, EXERCISE)
        assert result.status == f"refused: not a regular file ({kind})"
        assert result.sha256 == "" and not any(result.parts().values())
        assert all(c.message == result.status for c in result.checks)
    with pytest.raises(grading.Refused, match=r"\(character device\)"):
        grading.read_submission("/dev/zero")
    big = tmp_path / "big.ipynb"
    with big.open("wb") as handle:
        handle.truncate(grading.MAX_NOTEBOOK_BYTES + 1)  # sparse: no disk used
    result = grading.grade(big, EXERCISE)
    assert result.status.startswith("refused: ") and "over the cap" in result.status


def test_a_class_with_links_to_dev_zero_etc_shadow_and_the_solution_is_graded_without_reading_them(
        tmp_path, monkeypatch):
    folder = tmp_path / "class"
    solution = notebook(tmp_path / "solution" / "toy.ipynb")
    notebook(folder / "alice" / "toy.ipynb")
    for student, target in (("bob", "/dev/zero"), ("carol", "/etc/shadow"), ("dave", solution)):
        (folder / student).mkdir(parents=True)
        (folder / student / "toy.ipynb").symlink_to(target)
    (folder / "erin").mkdir()
    os.mkfifo(folder / "erin" / "toy.ipynb")  # opening it for reading would block the grader forever
    (folder / "frank").mkdir()
    (folder / "frank" / "toy.ipynb").symlink_to(tmp_path / "solution", target_is_directory=True)
    (folder / "grace").symlink_to(tmp_path / "solution", target_is_directory=True)  # a linked folder: not walked
    opened = []
    real_open = os.open

    def spy(path, *args, **kwargs):
        opened.append(os.path.realpath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    fake = FakeGrade()
    monkeypatch.setattr(grading, "grade", fake)
    results = {r.student: r for r in grading.grade_folder(folder, tmp_path / "book", EXERCISE, workers=2,
                                                           progress=False)}
    assert sorted(results) == ["alice", "bob", "carol", "dave", "erin", "frank"]
    assert fake.paths == [folder / "alice" / "toy.ipynb"]
    assert results["alice"].status == "ok"
    for student, kind in (("bob", "symlink"), ("carol", "symlink"), ("dave", "symlink"), ("erin", "FIFO"),
                          ("frank", "symlink")):
        assert results[student].status == f"refused: not a regular file ({kind})", student
        assert not any(results[student].parts().values())
    assert not {"/dev/zero", "/etc/shadow", str(solution.resolve())} & set(opened)
    book = {r["student"]: r["status"] for r in rows(tmp_path / "book")}
    assert book["bob"] == "refused: not a regular file (symlink)" and book["alice"] == "ok"


# ----------------------------------------------------------------------------- 2. written as it goes


def test_the_gradebook_is_written_after_each_submission_so_a_crash_loses_one_row(tmp_path, monkeypatch):
    folder = tmp_path / "class"
    for student in ("a", "b", "c", "d"):
        notebook(folder / student / "toy.ipynb")
    seen = []
    real_write = grading.write_gradebook

    def watch(results, gradebook):
        seen.append([r.student for r in results])
        return real_write(results, gradebook)

    monkeypatch.setattr(grading, "write_gradebook", watch)
    monkeypatch.setattr(grading, "grade", FakeGrade(crash_on="c"))
    with pytest.raises(Crash):
        grading.grade_folder(folder, tmp_path / "book", EXERCISE, workers=1, progress=False)
    assert seen[:3] == [[], ["a"], ["a", "b"]]  # rewritten after each one, not once at the end
    assert [r["student"] for r in rows(tmp_path / "book")][:2] == ["a", "b"]  # d may have finished too
    saved = json.loads((tmp_path / "book.json").read_text())["submissions"]
    assert [s["student"] for s in saved][:2] == ["a", "b"] and "c" not in [s["student"] for s in saved]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book-review", "book.csv", "book.json", "class"]  # no temporary
    assert not [p for p in (tmp_path / "book-review").iterdir() if p.name.startswith(".")]
    # The re-run keeps what was written and grades the rest; a bug in one grading is that row's status.
    fake = FakeGrade(bug_on="c")
    monkeypatch.setattr(grading, "grade", fake)
    results = grading.grade_folder(folder, tmp_path / "book", EXERCISE, workers=1, progress=False)
    assert "a" not in [p.parent.name for p in fake.paths] and "b" not in [p.parent.name for p in fake.paths]
    assert [r["student"] for r in rows(tmp_path / "book")] == ["a", "b", "c", "d"]
    assert [r.status for r in results] == ["ok", "ok", "grader error", "ok"]
    assert "a bug in the grader" in results[2].cell_errors[0].evalue


# ----------------------------------------------------------------------------- 3. the cache and the grader's version


def test_a_rerun_skips_graded_submissions_only_for_the_same_grader_version(tmp_path, monkeypatch):
    folder = tmp_path / "class"
    for student in ("a", "b"):
        notebook(folder / student / "toy.ipynb")
    fake = FakeGrade()
    monkeypatch.setattr(grading, "grade", fake)
    grading.grade_folder(folder, tmp_path / "book", EXERCISE, progress=False)
    assert len(fake.paths) == 2
    grading.grade_folder(folder, tmp_path / "book", EXERCISE, progress=False)
    assert len(fake.paths) == 2  # same notebooks, same grader: nothing regraded
    assert json.loads((tmp_path / "book.json").read_text())["submissions"][0]["grader"] == grading.grader_version()
    monkeypatch.setattr(grading, "grader_version", lambda: "0.2.0+fixed")
    grading.grade_folder(folder, tmp_path / "book", EXERCISE, progress=False)
    assert len(fake.paths) == 4  # a fixed grader regrades everything
    # Every row of a class run carries the version the run started with, even if the grader changes meanwhile.
    versions = iter(["0.2.0+start", "0.2.0+edited", "0.2.0+edited", "0.2.0+edited"])
    monkeypatch.setattr(grading, "grader_version", lambda: next(versions))
    grading.grade_folder(folder, tmp_path / "book", EXERCISE, progress=False)
    saved = json.loads((tmp_path / "book.json").read_text())["submissions"]
    assert [s["grader"] for s in saved] == ["0.2.0+start"] * 2


def test_the_grader_version_follows_the_course_code_and_the_course_version(tmp_path, monkeypatch):
    copy = tmp_path / "course"
    shutil.copytree(Path(grading.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(grading, "__file__", str(copy / "grading.py"))
    first = grading.grader_version()
    assert first.startswith(f"{ftcourse.__version__}+") and grading.grader_version() == first
    (copy / "checks.py").write_text((copy / "checks.py").read_text() + "\n# a fix\n")
    second = grading.grader_version()
    assert second != first
    monkeypatch.setattr(ftcourse, "__version__", "9.9.9")
    assert grading.grader_version() not in (first, second)


def test_the_command_refuses_a_linked_or_special_file_in_its_report(tmp_path, capsys):
    from ftcourse.course import cli

    link = tmp_path / "05_exercise_bert_base.ipynb"
    link.symlink_to("/dev/zero")
    report = tmp_path / "report.json"
    # --no-sandbox: nothing is run anyway, the file is refused before any kernel starts.
    assert cli.main(["grade", str(link), "--no-sandbox", "--report", str(report)]) == 1
    saved = json.loads(report.read_text())["submissions"]
    assert [s["status"] for s in saved] == ["refused: not a regular file (symlink)"]
    assert "refused: not a regular file (symlink)" in capsys.readouterr().out


# ----------------------------------------------------------------------------- 4. escaping what a submission controls

HOSTILE = "=HYPERLINK(\"http://evil\")\x1b[2J\x1b]0;pwned\x07\r\n\x7f\x9b\u202eevil"


def unsafe(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e]


def test_the_table_the_csv_and_the_json_escape_what_a_submission_controls(tmp_path):
    results = [grading.Submission(
        path=f"/class/{HOSTILE}/toy.ipynb", exercise="toy", student=HOSTILE, status="errors",
        failing_cell=grading.CellError(3, HOSTILE, "ValueError\x1b[31m", HOSTILE * 100),
        cell_errors=[grading.CellError(3, HOSTILE, "ValueError", HOSTILE)],
        checks=[grading.PartResult("x", False, "its cell 3 raised: " + HOSTILE, False)])]
    for student in ("+1", "-1", "@SUM(A1)", "\tcmd", "\rcmd", "plain"):
        results.append(grading.Submission(path="a/toy.ipynb", exercise="toy", student=student))
    shown = grading.table(results) + "\n" + grading.details(results[0])
    assert not unsafe(shown), shown
    assert "\\x1b[2J" in shown and "\\u202e" in shown
    assert len(max(shown.splitlines(), key=len)) < 1000  # a long message is truncated
    csv_path, json_path = grading.write_gradebook(results, tmp_path / "book")
    cells = [row[0] for row in csv.reader(csv_path.open(newline=""))][1:]
    assert cells[0].startswith("'=HYPERLINK") and not unsafe(cells[0])
    assert cells[1:] == ["'+1", "'-1", "'@SUM(A1)", "'\\tcmd", "'\\rcmd", "plain"]
    raw = json_path.read_text(encoding="utf-8")
    assert not unsafe(raw)
    assert json.loads(raw)["submissions"][0]["student"] == HOSTILE  # escaped, not lost


def test_clean_and_csv_cell():
    assert grading.clean("a\x1b[31mb\tc\nd\x00\x7f\x85\u2066") == "a\\x1b[31mb\\tc\\nd\\x00\\x7f\\x85\\u2066"
    assert grading.clean("x" * 500, 10) == "x" * 10 + "..."
    assert grading.clean("été ✓ 日本") == "été ✓ 日本"
    assert grading.csv_cell(3) == 3 and grading.csv_cell("-") == "'-" and grading.csv_cell("ok") == "ok"


def test_the_review_pages_show_control_characters_as_escapes(tmp_path):
    """A written answer keeps its lines, but its ANSI escapes and bidirectional overrides are shown, not obeyed."""
    answer = "line one\x1b[2J\x1b[31m red\x07\r\nline two \u202eevil\u2066\tend\x9b<b>"
    results = [grading.Submission(path="a/toy.ipynb", exercise="toy", student=HOSTILE, status="errors", answers=[
        {"question": "**Question 1** Why?", "answer": answer},
        {"question": "The student's train_loop", "answer": "def train_loop():\n\tpass  # \x1b]0;pwned\x07",
         "code": True}])]
    folder = grading.write_review(results, tmp_path / "review")
    for page in folder.iterdir():
        text = page.read_text(encoding="utf-8")
        assert not [c for c in text if c not in "\n\t" and grading._UNSAFE.match(c)], (page.name, text)
    page = next(p for p in folder.iterdir() if p.name != "index.html").read_text(encoding="utf-8")
    assert "line one\\x1b[2J\\x1b[31m red\\x07\nline two \\u202eevil\\u2066\tend\\x9b&lt;b&gt;" in page
    assert "def train_loop():\n\tpass  # \\x1b]0;pwned\\x07" in page
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in page  # the student's name (a folder name) too
    assert grading.visible("a\r\nb\rc") == "a\nb\\rc" and grading.visible("\u2028") == "\\u2028"


# ----------------------------------------------------------------------------- 5. each worker's share of memory


def test_each_worker_s_sandboxes_get_an_equal_share_of_the_machine_s_memory(tmp_path, monkeypatch):
    from ftcourse.course import sandbox

    for student in ("a", "b", "c"):
        notebook(tmp_path / "class" / student / "toy.ipynb")
    seen = []
    fake = FakeGrade()
    monkeypatch.setattr(grading, "grade", lambda *a, **k: seen.append(k["limits"]) or fake(*a, **k))
    monkeypatch.setattr(sandbox, "machine_memory", lambda: 12 * sandbox.GiB)
    grading.grade_folder(tmp_path / "class", tmp_path / "book", EXERCISE, workers=3, timeout=100, progress=False)
    assert {limits.sandbox_memory_bytes for limits in seen} == {4 * sandbox.GiB}
    assert {limits.cpu_seconds for limits in seen} == {260}
    chosen = sandbox.Limits(sandbox_memory_bytes=sandbox.GiB)
    grading.grade_folder(tmp_path / "class", tmp_path / "book", EXERCISE, workers=3, force=True, limits=chosen,
                         progress=False)
    assert seen[-1].sandbox_memory_bytes == sandbox.GiB  # what the caller chose stays


# ----------------------------------------------------------------------------- 6. evidence read back, and removed


def test_a_record_of_too_many_values_or_too_deep_is_refused_unparsed(tmp_path, monkeypatch):
    """Within the byte cap, a record of many small values would be gigabytes of objects: refused, counted on its
    bytes (strings' brackets and commas not counted), as a malformed record is."""
    from ftcourse.course import verdicts

    monkeypatch.setattr(verdicts, "MAX_JSON_VALUES", 20)
    monkeypatch.setattr(verdicts, "MAX_JSON_DEPTH", 4)
    fits = {"name": "[[[{,:,:}]]] \\\" [", "shape": [768, 768], "trains": True, "more": [[], {}, None, 1.5]}
    (tmp_path / "fits.json").write_text(json.dumps(fits, indent=2))
    assert verdicts.read_json(tmp_path, "fits.json") == fits  # 14 values, 3 deep
    (tmp_path / "many.json").write_text("[" + ", ".join(["[]"] * 20) + "]")
    with pytest.raises(verdicts.EvidenceMissing, match=r"many.json holds 21 JSON values, more than the 20"):
        verdicts.read_json(tmp_path, "many.json")
    (tmp_path / "deep.json").write_text('{"a": [[[[1]]]]}')
    with pytest.raises(verdicts.EvidenceMissing, match=r"deep.json nests deeper than the 4 levels"):
        verdicts.read_json(tmp_path, "deep.json")
    monkeypatch.setattr(verdicts, "MAX_JSON_VALUES", 10**6)
    monkeypatch.setattr(verdicts, "MAX_JSON_DEPTH", 10**6)
    (tmp_path / "deeper.json").write_text("[" * 100_000 + "]" * 100_000)  # past the parser's recursion limit
    with pytest.raises(verdicts.EvidenceMissing, match=r"deeper.json is not JSON \(RecursionError\)"):
        verdicts.read_json(tmp_path, "deeper.json")


def test_an_evidence_folder_is_removed_whatever_a_run_left_in_it(tmp_path):
    """1,500 nested folders (past Python's recursion limit: shutil.rmtree fails), folders and files without
    permissions, links (removed, never followed), a FIFO."""
    from ftcourse.course import sandbox

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    evidence = tmp_path / "ftcourse-evidence-x"
    evidence.mkdir()
    folder = os.open(evidence, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d" * 100, dir_fd=folder)  # 150,000 characters of path: past PATH_MAX too
        inner = os.open("d" * 100, os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    (Path(f"/proc/self/fd/{folder}") / "deepest").write_text("x")
    os.close(folder)
    (evidence / "locked").mkdir()
    (evidence / "locked" / "file").write_text("x")
    (evidence / "locked" / "file").chmod(0)
    (evidence / "locked").chmod(0o500)
    (evidence / "closed").mkdir(mode=0)
    (evidence / "link").symlink_to(outside)
    (evidence / "file-link").symlink_to(outside / "keep")
    os.mkfifo(evidence / "fifo")
    evidence.chmod(0o500)
    sandbox.remove_tree(evidence)
    assert not os.path.lexists(evidence)
    assert (outside / "keep").read_text() == "kept" and sorted(tmp_path.iterdir()) == [outside]
    sandbox.remove_tree(evidence)  # already gone: nothing to do
