"""The one grid search every chooser runs: score each value of a grid, and when the best sits at
an end, extend the grid one ``step`` past that end (up to ``extensions`` times), so a chosen value
is never one the grid merely cut off.

``search`` knows nothing of what it scores: ``experiments.choose_lr`` scores a run spec,
``pairs.choose_lr`` a cross-encoder, ``readout.choose_readout_lrs`` a BiLSTM readout. It imports
nothing, so any module can use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GridResult:
    """What a grid search found: ``scores`` in the order tried, the ``best`` value (ties go to
    the value tried first), and whether it is still at an end of the grid after every extension."""

    scores: dict
    best: float
    at_edge: bool

    @property
    def grid(self) -> list[float]:
        return sorted(self.scores)

    def line(self, score_format: str = "{:.3f}") -> str:
        """``"1e-4 0.780, 4e-4 0.812 -> 4e-4"``: what ``line`` writes for this search."""
        return line(self.scores, self.best, score_format, self.at_edge)


def line(scores: dict, best, score_format: str = "{:.3f}", at_edge: bool = False) -> str:
    """Every value tried and its score, in value order, then the chosen one, flagged when it is still
    at an end of the grid: the one way every chooser's sweep is printed."""
    tried = ", ".join(f"{value:g} {score_format.format(score)}" for value, score in sorted(scores.items()))
    return f"{tried} -> {best:g}" + (" (still at the grid's end)" if at_edge else "")


def search(score, grid, step: float = 4.0, extensions: int = 2, progress=None) -> GridResult:
    """``score(value) -> float`` (higher is better) at every value of ``grid``, then past the end
    the best sits on, one ``step`` (a factor) at a time, up to ``extensions`` times. ``progress``
    wraps the first pass (a ``tqdm``, for instance)."""
    grid = sorted(grid)
    if not grid:
        raise ValueError("The grid is empty. Fix: pass at least one value to try.")
    scores = {}
    for value in (progress(grid) if progress else grid):
        scores[value] = score(value)
    for _ in range(extensions):
        tried, best = sorted(scores), max(scores, key=scores.get)
        if len(tried) < 2 or best not in (tried[0], tried[-1]):
            break
        value = tried[-1] * step if best == tried[-1] else tried[0] / step
        scores[value] = score(value)
    best, tried = max(scores, key=scores.get), sorted(scores)
    return GridResult(scores, best, len(tried) > 1 and best in (tried[0], tried[-1]))
