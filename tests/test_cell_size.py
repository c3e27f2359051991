"""Lesson cells stay short, and mostly about the idea rather than its display.

A lesson cell (notebooks/01..04) shows the idea and calls the package; plumbing (plotting,
building verdicts, formatting) lives in ``ftcourse`` where it is tested. Two thresholds,
also stated in CONTRIBUTING.md's Notebooks section:

- at most ``MAX_CODE_LINES`` code lines (non-blank, non-comment) in any code cell;
- at most ``MAX_PRESENTATION_SHARE[lesson]`` of a lesson's code lines print, plot or format
  (``PRESENTATION``), each set just above the share measured when the test was written
  (01: 22%, 02: 36%, 03: 20%, 03b: 29%, 03c: 22%, 04: 29%, 04b: 18%), so a lesson's display can shrink but not grow.
"""

import re

import nbformat
import pytest

from ftcourse.config import REPO_ROOT

MAX_CODE_LINES = 12
MAX_PRESENTATION_SHARE = {"01": 0.25, "02": 0.38, "03": 0.22, "03b": 0.31, "03c": 0.24, "04": 0.31, "04b": 0.20}
LESSONS = sorted(REPO_ROOT.glob("notebooks/0[1-4]*_*.ipynb"))
# A line that shows a result rather than computes it: printing, displaying, plotting, formatting.
PRESENTATION = re.compile(r"\bprint\(|\bdisplay\(|\bplt\.|\bax\.|\baxes\b|\bfig\b|plot|\.style\b|\bTable\(|"
                          r"_table\(|\bheadline\(|\bformat")


def lesson(path) -> str:
    return path.name.split("_", 1)[0]


def code_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]


def code_cells(path):
    nb = nbformat.read(path, as_version=4)
    return [(i, code_lines(c.source)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def presentation_share(path) -> float:
    lines = [line for _, cell in code_cells(path) for line in cell]
    return sum(bool(PRESENTATION.search(line)) for line in lines) / max(1, len(lines))


def test_the_lessons_are_found():
    assert [lesson(p) for p in LESSONS] == ["01", "02", "03", "03b", "03c", "04", "04b"]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_lesson_cell_exceeds_the_code_line_limit(path):
    long = {i: len(lines) for i, lines in code_cells(path) if len(lines) > MAX_CODE_LINES}
    assert not long, (f"{path.name}: cells {long} (cell index: code lines) exceed {MAX_CODE_LINES} code lines. "
                      "Fix: move plotting, verdicts and formatting into a well-named ftcourse function.")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_printing_and_plotting_stay_a_minority_of_a_lesson(path):
    share, limit = presentation_share(path), MAX_PRESENTATION_SHARE[lesson(path)]
    assert share <= limit, (
        f"{path.name}: {share:.0%} of the code lines print, plot or format (limit {limit:.0%}). "
        "Fix: return a report.Table, or move the display into a package function.")


def test_the_counters_count_what_they_say():
    assert code_lines("x = 1\n\n# a comment\n  # indented comment\nprint(x)  # shown\n") == ["x = 1", "print(x)  # shown"]
    assert PRESENTATION.search("plt.show()") and not PRESENTATION.search("model = heads.TaskModel(encoder, head)")
