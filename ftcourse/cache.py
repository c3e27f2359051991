"""The feature cache: tensors an encoder computed once, read back on the next run.

One file per entry, ``<cache>/features/<name>-<hash>.safetensors``, where the hash is of a
key that lists everything the tensors depend on (the encoder's weights, the tokenizer, the
data, the settings). The key is stored inside the file and checked on every read, so an
entry is never used for anything but what built it. Writes are atomic
(``config.publishing``): parallel notebooks computing one entry never see half of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import torch

from . import config

FORMAT = 1  # bump when the layout of an entry changes: every old entry is then rebuilt


class FeatureCacheMismatchError(ValueError):
    """A cache entry was built from something other than what the caller asked for."""


def entry_path(name: str, key: dict) -> Path:
    """Where the entry for ``key`` lives: ``name`` (readable) and a hash of the key (exact)."""
    digest = hashlib.sha256(json.dumps({"format": FORMAT, **key}, sort_keys=True).encode()).hexdigest()[:16]
    readable = re.sub(r"[^\w.-]+", "_", name)
    return config.cache_dir() / "features" / f"{readable}-{digest}.safetensors"


def save(path: Path, tensors: dict[str, torch.Tensor], key: dict, metadata: dict | None = None) -> None:
    """Write ``tensors`` with ``key`` (and any JSON-able ``metadata``) inside the file."""
    from safetensors.torch import save_file

    stored = {"key": json.dumps(key, sort_keys=True), **{k: json.dumps(v) for k, v in (metadata or {}).items()}}
    with config.publishing(path) as private:  # no half file under the real name, even mid-crash
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(private), metadata=stored)


def load(path: Path, expected_key: dict | None = None) -> tuple[dict[str, torch.Tensor], dict, dict]:
    """The tensors, key and metadata of the entry at ``path``. With ``expected_key``, refuse an
    entry built from anything else, naming what differs."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No feature cache at {path}. Fix: build it (the cached_features functions do).")
    with safe_open(str(path), framework="pt") as f:
        stored = f.metadata() or {}
    if "key" not in stored:
        raise FeatureCacheMismatchError(
            f"{path.name} carries no key, so what built it is unknown. Fix: delete it and extract again.")
    key = json.loads(stored.pop("key"))
    if expected_key is not None and key != expected_key:
        differences = "; ".join(f"{name}: cache has {key.get(name)!r}, wanted {expected_key.get(name)!r}"
                                for name in sorted(set(key) | set(expected_key)) if key.get(name) != expected_key.get(name))
        raise FeatureCacheMismatchError(
            f"The feature cache {path.name} was built from something else ({differences}). "
            "Fix: extract again (cached_features(..., rebuild=True)) or delete the file.")
    return load_file(str(path)), key, {k: json.loads(v) for k, v in stored.items()}
