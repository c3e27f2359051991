"""One comparison, one answer: the canonical SST-2 runs (the frozen head, LoRA r=8 and full
fine-tuning at lesson 3b's budget) print the same figures in every committed lesson that quotes
them, because they are the same records of the run store."""

import re

import pytest

from ftcourse import frontier, report
from ftcourse.config import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"


def _figures(stem: str) -> dict:
    [headline] = report.headlines_in(NOTEBOOKS / f"{stem}.ipynb")
    return {f["name"]: f for f in headline["figures"]}


def _as_accuracy(figure: dict) -> float:
    return figure["measured"] / 100 if figure["unit"].endswith("x100") else figure["measured"]


def quoted(stem: str, method: str) -> float:
    """The canonical ``method``'s mean dev accuracy as lesson ``stem``'s headline prints it."""
    names = {
        "01_composition": rf"{re.escape(method)}, the canonical runs \(lesson 3b\), mean of \d+ seeds",
        "03b_peft_frontier": rf"{re.escape(method)} dev accuracy \(mean of \d+ seeds\)",
        "03c_between_the_extremes": rf"{re.escape({'full fine-tuning': 'nothing frozen', 'LoRA r=8': 'LoRA r=8', frontier.FROZEN: 'k=6'}[method])} dev accuracy, \d+-seed mean",
    }
    figures = _figures(stem)
    found = [f for name, f in figures.items() if re.fullmatch(names[stem], name)]
    assert len(found) == 1, f"{stem} quotes no single canonical {method!r} figure: {sorted(figures)}"
    return _as_accuracy(found[0])


@pytest.mark.parametrize("method", frontier.CANONICAL_METHODS)
def test_every_lesson_quoting_the_canonical_comparison_prints_the_same_figure(method):
    figures = {stem: quoted(stem, method) for stem in ("01_composition", "03b_peft_frontier", "03c_between_the_extremes")}
    assert max(figures.values()) - min(figures.values()) < 1e-9, figures
