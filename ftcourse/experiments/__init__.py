"""ftcourse.experiments: one experiment system, in modules by role.

- ``engine``: a declared ``RunSpec`` trained into one ``RunRecord`` type;
- ``store``: every run keyed by its spec, data, encoder and code, trained once per build;
- ``choose``: one learning-rate chooser on a carved validation part, extended past its edges;
- ``compare``: verdicts from paired differences over seeds, with their intervals, ties and all.
"""

from .choose import Choice, choose_lr
from .compare import Comparison, paired, summarize
from .engine import RunRecord, RunSpec, by_seed, train_run
from .store import RunStore, default_store, run

__all__ = ["Choice", "Comparison", "RunRecord", "RunSpec", "RunStore", "by_seed", "choose_lr", "default_store",
           "paired", "run", "summarize", "train_run"]
