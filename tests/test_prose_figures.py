"""No figure in prose that no cell computed (issue 23).

Every figure in a notebook's markdown (a number with a decimal point, or followed by %, x, ×
or "points") must be produced by that notebook, in a cell's output or its code, or be one the
course cites: a paper's figure in ``ftcourse.published``, or the course's own arithmetic in
``ftcourse.derived``. Module docstrings are held to the cited figures. Prose that depends on a
run's outcome belongs in the cell that measured it.
"""

import ast
import numbers
import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from ftcourse import derived, published
from ftcourse.config import REPO_ROOT
from ftcourse.course.catalog import course_notebooks

FIGURE = re.compile(r"(?<![\w.,])(\d[\d,]*\.\d+|\d[\d,]*(?=\s?%|×|x\b| points?\b))")
MODULES = sorted((REPO_ROOT / "ftcourse").rglob("*.py"))


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, numbers.Number) and not isinstance(value, bool):
        yield value


def _spellings(value) -> set[str]:
    forms = {f"{value}", f"{value:,}", f"{value:.0f}", f"{value:,.0f}"}
    for scale in (1, 1e6, 1e9):
        forms |= {f"{value / scale:.{d}f}" for d in (1, 2, 3)}
    return {form.replace(",", "") for form in forms}


def cited() -> set[str]:
    """Every spelling of every figure the course cites."""
    values = [v for name in dir(published) if name.isupper() for v in _numbers(getattr(published, name))]
    values += list(_numbers(derived.claims()))
    values.append(sum(published.BERT_PRETRAINING_WORDS.values()))  # 3.3B words
    return {form for v in values for form in _spellings(v)}


def figures(text: str) -> list[str]:
    return [m.group(1).replace(",", "") for m in FIGURE.finditer(text)]


def produced(nb) -> str:
    """What a notebook's cells print and contain, commas removed."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts.append(cell.source)
        for output in cell.get("outputs", []):
            parts.append(str(output.get("text", "")))
            parts += [str(v) for v in output.get("data", {}).values()]
    return " ".join(parts).replace(",", "")


def uncomputed(nb, allowed: set[str]) -> list[tuple[int, str]]:
    made = produced(nb)
    return [(i, figure) for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for figure in figures(cell.source) if figure not in allowed and figure not in made]


@pytest.fixture(scope="module")
def allowed():
    return cited()


@pytest.mark.parametrize("path", course_notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_figure_in_a_notebooks_prose_is_computed_there_or_cited(path, allowed):
    missing = uncomputed(nbformat.read(path, as_version=4), allowed)
    assert not missing, (f"{path.name}: figures in markdown that no cell produced and no paper printed "
                         f"(cell, figure): {missing}. Fix: print it from the cell that measures it, cite it "
                         "in ftcourse.published, or word the sentence so it holds for any outcome.")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_module_docstrings_state_only_cited_figures(path, allowed):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    # settings the docstring names as the recipe's own (lr 2e-5, weight decay 0.01, clipping at 1.0)
    recipe = {"0.01", "1.0"}
    missing = [f for f in figures(doc) if f not in allowed and f not in recipe]
    assert not missing, f"{path.name}'s docstring states {missing}, which no paper printed and no formula derives."


def test_the_check_catches_a_figure_no_cell_produced(allowed):
    nb = new_notebook(cells=[new_markdown_cell("The probe reads 0.813, a gain of 4.2 points, 7x faster."),
                             new_code_cell("print(accuracy)", outputs=[new_output("stream", text="0.813\n")])])
    assert uncomputed(nb, allowed) == [(0, "4.2"), (0, "7")]
    nb.cells[0].source = "BERT's table reads 96.4 for fine-tuning; 294,912 LoRA parameters are 0.27%."
    assert uncomputed(nb, allowed) == []  # published (96.4) and derived (294,912; 0.27)


def test_the_figures_checked_are_counted():
    counted = sum(len(figures(c.source)) for p in course_notebooks()
                  for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown")
    assert counted > 10  # the scan finds the prose's figures at all
