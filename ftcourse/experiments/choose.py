"""One chooser: a learning rate picked on a validation part carved from the training split.

``choose_lr`` trains a spec at each rate of a grid and keeps the one whose run scores best on
``validation`` (never on the split a lesson reports). When the best sits at an end of the grid,
the grid grows one ``step`` further that way, up to ``extensions`` times (``grid.search``, the
one search every chooser runs); a rate still at the edge after that is flagged (``at_edge``).
Every run goes through the store, so a second lesson asking the same sweep reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tqdm.auto import tqdm

from .. import data
from . import engine, grid as grid_module, store as store_module


@dataclass(frozen=True)
class Choice:
    """The chosen rate, its run, and every run tried (in the order tried)."""

    lr: float
    best: engine.RunRecord
    tried: tuple
    at_edge: bool  # the best is still at an end of the grid after every extension

    @property
    def grid(self) -> list[float]:
        return sorted(r.lr for r in self.tried)

    def line(self, name: str = "") -> str:
        """``"name lr on validation: 1e-4 0.780, 4e-4 0.812 -> 4e-4"``."""
        tried = {r.lr: r.validation for r in self.tried}
        return f"{name + ' ' if name else ''}lr on validation: " + grid_module.line(tried, self.lr, at_edge=self.at_edge)


def choose_lr(base: engine.RunSpec, grid, encoder, train, validation, dev=None, step: float = 4.0,
              extensions: int = 2, store: store_module.RunStore | None = None, progress: bool = True) -> Choice:
    """``base`` at every rate of ``grid`` (then extended), the best on ``validation`` kept.
    Runs are also scored on ``dev`` when given (reported for the chosen one; never read here).
    Ties go to the rate tried first."""
    data.require_validation(validation, "experiments.choose_lr")
    scored = {"validation": validation, **({"dev": dev} if dev is not None else {})}

    runs = {}

    def at(lr):
        runs[lr] = store_module.run(base.with_(lr=lr), encoder, train, scored, store=store)
        return runs[lr].validation

    found = grid_module.search(at, grid, step, extensions,
                               progress=lambda values: tqdm(values, desc=f"{base.method}: lr sweep", leave=False,
                                                            disable=not progress))
    return Choice(found.best, runs[found.best], tuple(runs[lr] for lr in found.scores), found.at_edge)
