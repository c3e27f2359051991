"""ftcourse.experiments: one experiment system, in modules by role.

- ``engine``: a declared ``RunSpec`` trained into one ``RunRecord`` type;
- ``store``: every run keyed by its spec, data, encoder and code, trained once per build;
- ``choose``: one learning-rate chooser on a carved validation part, extended past its edges;
- ``grid``: the grid search every chooser runs (the extension past an edge), free of any import;
- ``compare``: verdicts from paired differences over seeds, with their intervals, ties and all.

Its names load on first use (``compare`` needs nothing else, so a module the engine imports may
read its verdicts without a cycle).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the static view of what this package holds (also what the notebook stamps follow)
    from . import choose, compare, engine, grid, store  # noqa: F401

_HOME = {"Choice": "choose", "choose_lr": "choose", "Comparison": "compare", "paired": "compare",
         "summarize": "compare", "search": "grid", "GridResult": "grid", "RunRecord": "engine", "RunSpec": "engine", "by_seed": "engine",
         "train_run": "engine", "RunStore": "store", "default_store": "store", "run": "store"}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
