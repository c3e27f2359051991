"""The committed notebooks' outputs come from the current code: CI executes each notebook only at
small profiles, so each committed notebook carries a stamp of what it was executed from at the
offline profile (``ftcourse.course.freshness``), and a stale stamp fails here."""

import shutil

import nbformat
import pytest

from ftcourse.course import freshness, notebooks

NOTEBOOKS = notebooks.course_notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_notebook_comes_from_the_current_code(path, shared_data):
    reasons = freshness.stale_reasons(nbformat.read(path, as_version=4), data=shared_data)
    assert not reasons, (
        f"{path.parent.name}/{path.name} is stale: " + "; ".join(reasons) + ". Its outputs may not be what the "
        f"current code prints. Fix: {freshness.reexecute_command(path)} (every stale one: "
        "python -m ftcourse.course.notebooks execute --stale), then commit it.")


def _stamped(tmp_path, data):
    """A copy of the package's tree and a stamped notebook that imports two of its modules."""
    root = tmp_path / "repo"
    shutil.copytree(notebooks.REPO_ROOT / "ftcourse", root / "ftcourse",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (data / "sst2").mkdir(parents=True)
    (data / "sst2" / "train.tsv").write_text("sentence\tlabel\na fine film\t1\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A lesson"),
                nbformat.v4.new_code_cell("%matplotlib inline\nimport ftcourse\nprofile = ftcourse.setup()", execution_count=1),
                nbformat.v4.new_code_cell("from ftcourse import regimes\nprint(regimes.__name__)", execution_count=2)]
    nb.metadata[freshness.STAMP_KEY] = freshness.stamp(nb, "offline", data, root)
    return root, nb


def test_a_fresh_stamp_reads_fresh_and_survives_cleaning(tmp_path):
    root, nb = _stamped(tmp_path, tmp_path / "data")
    assert freshness.stale_reasons(nb, data=tmp_path / "data", root=root) == []
    assert notebooks.problems(notebooks.clean(nb)) == []  # the stamp is kept metadata, not a stray key
    assert freshness.stale_reasons(notebooks.clean(nb), data=tmp_path / "data", root=root) == []
    reached = freshness.modules_reached(freshness.code_cells(nb), root)
    assert {"ftcourse", "ftcourse.regimes", "ftcourse.training", "ftcourse.config"} <= set(reached)
    assert not any(name.startswith("ftcourse.course") for name in reached)  # a lesson never reaches the grader


@pytest.mark.parametrize("plant, expected", [
    ("code cell", "its code cells changed"),
    ("module it imports", "the module ftcourse.regimes changed"),
    ("module reached through an import", "the module ftcourse.training changed"),
    ("profile", "the offline profile's settings changed"),
    ("data", "the benchmark files (FTCOURSE_DATA) changed"),
    ("no stamp", "carries no stamp"),
    ("another profile", "executed under the 'smoke' profile"),
])
def test_a_planted_stale_notebook_is_named_with_what_changed(tmp_path, plant, expected):
    data = tmp_path / "data"
    root, nb = _stamped(tmp_path, data)
    profile = "offline"
    if plant == "code cell":
        nb.cells[2].source += "\nprint(1)"
    elif plant == "module it imports":
        (root / "ftcourse" / "regimes.py").write_text((root / "ftcourse" / "regimes.py").read_text() + "\nX = 1\n")
    elif plant == "module reached through an import":
        (root / "ftcourse" / "training.py").write_text((root / "ftcourse" / "training.py").read_text() + "\nX = 1\n")
    elif plant == "profile":
        from ftcourse import config

        profile = config.PROFILES["offline"].with_(lora_lr=1.0)
    elif plant == "data":
        (data / "sst2" / "train.tsv").write_text("sentence\tlabel\na dull film\t0\n")
    elif plant == "no stamp":
        del nb.metadata[freshness.STAMP_KEY]
    elif plant == "another profile":
        nb.metadata[freshness.STAMP_KEY] = freshness.stamp(nb, "smoke", data, root)
    reasons = freshness.stale_reasons(nb, profile=profile, data=data, root=root)
    assert any(expected in reason for reason in reasons), reasons


def test_a_module_the_notebook_never_reaches_does_not_make_it_stale(tmp_path):
    data = tmp_path / "data"
    root, nb = _stamped(tmp_path, data)
    grading = root / "ftcourse" / "course" / "grading.py"
    grading.write_text(grading.read_text() + "\nX = 1\n")
    (root / "ftcourse" / "regimes.py").touch()  # a new mtime, the same bytes
    assert freshness.stale_reasons(nb, data=data, root=root) == []


def test_a_notebook_never_executed_shows_nothing_to_be_stale(tmp_path):
    root, nb = _stamped(tmp_path, tmp_path / "data")
    del nb.metadata[freshness.STAMP_KEY]
    for cell in nb.cells[1:]:
        cell.execution_count = None
    assert freshness.stale_reasons(nb, data=tmp_path / "data", root=root) == []  # no outputs at all
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="ftcourse.regimes\n")]
    assert freshness.stale_reasons(nb, data=tmp_path / "data", root=root) == ["it carries no stamp of what it was executed from"]


def test_the_stale_command_names_the_notebook_and_exits_nonzero(tmp_path, monkeypatch, capsys):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import ftcourse", execution_count=1)]
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nb, path)
    assert notebooks.main(["stale", str(path)]) == 1
    assert "lesson.ipynb: it carries no stamp" in capsys.readouterr().out


def test_rewording_a_docstring_or_a_comment_does_not_make_a_notebook_stale(tmp_path):
    data = tmp_path / "data"
    root, nb = _stamped(tmp_path, data)
    regimes = root / "ftcourse" / "regimes.py"
    text = regimes.read_text()
    reworded = text.replace('"""', '"""Reworded. ', 1) + "\n# a new comment\n"
    regimes.write_text(reworded)
    assert freshness.stale_reasons(nb, data=data, root=root) == []
    regimes.write_text(reworded.replace("def ", "def _x(): pass\n\n\ndef ", 1))  # code: stale
    assert freshness.stale_reasons(nb, data=data, root=root) == ["the module ftcourse.regimes changed"]
