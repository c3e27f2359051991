"""Every committed notebook is clean: what nbval and readers see is content only."""

import nbformat
import pytest

from ftcourse.course import notebooks

NOTEBOOKS = notebooks.course_notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_is_clean(path):
    nb = nbformat.read(path, as_version=4)
    assert notebooks.problems(nb) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_starts_with_setup(path):
    nb = nbformat.read(path, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "ftcourse.setup(" in first_code.source


def test_cleaner_fixes_what_the_checker_finds():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"state": {}}
    nb.cells = [nbformat.v4.new_code_cell("1", execution_count=4), nbformat.v4.new_code_cell("2", execution_count=2)]
    nb.cells[0].metadata["collapsed"] = True
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="saved to /work/main/x\n")]
    found = notebooks.problems(nb)
    assert any("stray keys" in p for p in found)
    assert any("execution counts" in p for p in found)
    assert any("machine path" in p for p in found)
    cleaned = notebooks.clean(nb)
    assert [c.execution_count for c in cleaned.cells] == [1, 2]
    assert [p for p in notebooks.problems(cleaned) if "machine path" not in p] == []
