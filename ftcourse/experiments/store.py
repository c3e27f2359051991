"""One run store: a spec trains once per build, and every notebook that quotes it reads the same record.

A run is keyed by everything that decides it: its ``RunSpec``, the encoder's weights
(``models.fingerprint``), the content of every split it trains on or is scored on, and a digest
of the code that trains it (``provenance.code_digest`` of the engine and all it reaches). The
record is one JSON file, ``<cache>/runs/<method>-<hash>.json``, with the key inside, checked
on every read. Change any of those and the run trains again; change nothing and a second
notebook (or a test) reads it instead of training it.

Two notebooks of a parallel build asking for one run at once do not both train it: the first
takes a lock on the entry, the second waits for it and reads what it wrote.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
from contextlib import contextmanager
from pathlib import Path

from .. import config, models, provenance
from . import engine

FORMAT = 1  # bump when a record's layout changes: every old record then trains again
_CODE = "ftcourse.experiments.engine"


def split_digest(split) -> str:
    """The content of a tokenised split: its token ids and labels, in order."""
    digest = hashlib.sha256()
    for column in ("input_ids", "labels"):
        digest.update(json.dumps(list(split[column])).encode())
    return digest.hexdigest()[:16]


class RunStore:
    """Records on disk under ``root``, one per key. ``trained`` and ``read`` count, for this
    process, the runs it trained and the runs it found stored."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else config.cache_dir() / "runs"
        self.trained, self.read = 0, 0
        self._code = None

    def key(self, spec: engine.RunSpec, encoder, train, scored: dict) -> dict:
        if self._code is None:
            self._code = provenance.code_digest(_CODE)
        return {"format": FORMAT, "spec": spec.as_dict(), "encoder": models.fingerprint(encoder),
                "train": split_digest(train), "scored": {name: split_digest(s) for name, s in sorted(scored.items())},
                "code": self._code}

    def path(self, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        readable = re.sub(r"[^\w.=-]+", "_", key["spec"]["method"])
        return self.root / f"{readable}-{digest}.json"

    def get(self, key: dict) -> engine.RunRecord | None:
        path = self.path(key)
        if not path.is_file():
            return None
        stored = json.loads(path.read_text())
        if stored.get("key") != key:  # a hash collision or a hand-edited file: never serve it
            return None
        return engine.RunRecord.from_dict(stored["record"])

    @contextmanager
    def _locked(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel notebook training this run: wait for its record
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def run(self, spec: engine.RunSpec, encoder, train, scored: dict, num_labels: int | None = None) -> engine.RunRecord:
        """The record of ``spec`` trained on ``train`` and scored on ``scored``: read from the
        store when this exact run was made before, trained (and stored) otherwise."""
        key = self.key(spec, encoder, train, scored)
        path = self.path(key)
        with self._locked(path):
            found = self.get(key)
            if found is not None:
                self.read += 1
                return found
            record = engine.train_run(spec, encoder, train, scored, num_labels)
            with config.publishing(path) as private:
                private.write_text(json.dumps({"key": key, "record": record.as_dict()}, indent=1))
            self.trained += 1
            return record


_default: RunStore | None = None


def default_store() -> RunStore:
    """The store under the cache folder (``FTCOURSE_CACHE``), shared by every notebook of a build."""
    global _default
    root = config.cache_dir() / "runs"
    if _default is None or _default.root != root:
        _default = RunStore(root)
    return _default


def run(spec: engine.RunSpec, encoder, train, scored: dict, num_labels: int | None = None,
        store: RunStore | None = None) -> engine.RunRecord:
    """``spec``'s record from ``store`` (default: ``default_store()``), trained only if new."""
    return (store or default_store()).run(spec, encoder, train, scored, num_labels)
