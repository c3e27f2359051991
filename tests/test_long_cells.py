"""A student is told before a long cell how long it takes (issue 36): every code cell that took
``LONG_CELL_SECONDS`` or more in the last measured build (``data/notebook_timings.json``: two
notebooks at a time on 2 cores, one thread each, as ``make course`` runs them) has, in the nearest
markdown cell above it, "about N minutes on 2 cores" with N that build's time, rounded. The cell's
own bar (tqdm's, with its estimate of the time left) shows the rest while it runs."""

import re

import nbformat
import pytest

from ftcourse.config import REPO_ROOT
from ftcourse.course import notebooks

LONG_CELL_SECONDS = 120
SAYS = re.compile(r"about (\d+) minutes? on 2 cores")


def long_cells():
    timings = notebooks.read_timings()
    for path in notebooks.course_notebooks():
        key = f"{path.parent.name}/{path.stem}"
        for index, seconds in sorted(timings.get(key, {}).get("cells", {}).items(), key=lambda item: int(item[0])):
            if seconds >= LONG_CELL_SECONDS:
                yield pytest.param(path, int(index), seconds, id=f"{key}:{index}")


def stated_minutes(nb, index: int) -> list[int]:
    """The minutes the nearest markdown cell above code cell ``index`` announces."""
    above = next((cell for cell in reversed(nb.cells[:index]) if cell.cell_type == "markdown"), None)
    return [int(m) for m in SAYS.findall(above.source)] if above is not None else []


@pytest.mark.parametrize("path, index, seconds", list(long_cells()))
def test_a_long_cell_is_announced_with_its_measured_time(path, index, seconds):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[index].cell_type == "code", f"the timings name cell {index}, not a code cell: re-measure"
    expected = max(1, round(seconds / 60))
    assert expected in stated_minutes(nb, index), (
        f"{path.name}, cell {index} took {seconds:.0f} s in the last measured build: the markdown above it "
        f"should say 'about {expected} minutes on 2 cores'")


def test_the_announcement_is_read_from_the_nearest_markdown_above():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Sweeps every rate (about 4 minutes on 2 cores)."),
                nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("train()"),
                nbformat.v4.new_markdown_cell("Then a quick one."), nbformat.v4.new_code_cell("y = 2")]
    assert stated_minutes(nb, 2) == [4]
    assert stated_minutes(nb, 4) == []  # a later markdown cell announces nothing for cell 4
