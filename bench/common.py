"""What the benchmarks share: quiet libraries, the SST-2 subset, the machine's description."""

from __future__ import annotations

import os
import platform
import time
import warnings
from pathlib import Path
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass
class Row:
    """One line of the results table: a measured figure beside its target."""

    benchmark: str
    figure: str  # the measured figure, formatted
    target: str  # e.g. ">= 0.5", or "" when there is no target
    met: bool | None  # None: no target, or not measured
    note: str = ""


def quiet() -> None:
    """The environment's profile made the session's (offline: the hub is never asked), and
    silent: benchmarks print their own figures, not library chatter."""
    from ftcourse import session

    session.setup(verbose=False)
    warnings.filterwarnings("ignore", message="The course encoder is missing")


#: The encoder's folder before ``pin_encoder`` copied it (None: not pinned). A sandboxed grading run
#: has a private /tmp, where the copy is not visible, so ``grading`` hands its kernels this one.
UNPINNED_ENCODER: str | None = None


def pin_encoder() -> str:
    """Snapshot the offline encoder's folder and make the session's profile read the copy, so
    that every benchmark of a run uses the same weights even if the course encoder is
    retrained meanwhile. Returns a description of the encoder for the table."""
    import dataclasses
    import shutil
    import tempfile

    from ftcourse import config, models

    source = models.model_source("encoder")
    shown = models.describe()["encoder"]
    if models.is_local(source):
        global UNPINNED_ENCODER
        UNPINNED_ENCODER = source
        snapshot = Path(tempfile.mkdtemp(prefix="ftcourse-bench-encoder-"))
        shutil.copytree(source, snapshot, dirs_exist_ok=True)
        config.activate(dataclasses.replace(config.get_profile(), encoder=str(snapshot)))
        os.environ["FTCOURSE_ENCODER"] = str(snapshot)  # and the benchmarks' child processes
    c = models.load_encoder(add_pooling_layer=False).config
    return (f"{shown} ({c.num_hidden_layers} layers, hidden {c.hidden_size}, "
            f"{c.num_attention_heads} heads, feed-forward {c.intermediate_size})")


def machine() -> str:
    """The machine a table came from, in one line."""
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    memory = psutil.virtual_memory().total / 2**30
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} logical cores, {memory:.0f} GiB, {gpu}; torch {torch.__version__} "
            f"with {torch.get_num_threads()} threads; load average {load:.1f} at start")


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@contextmanager
def stopwatch():
    """``with stopwatch() as t: ...`` then ``t["seconds"]`` (wall) and ``t["cpu_seconds"]``
    (this process's CPU time, which a shared machine's load stretches much less), with the
    GPU's queue drained."""
    result = {"seconds": float("nan"), "cpu_seconds": float("nan")}
    synchronize()
    start, cpu_start = time.perf_counter(), time.process_time()
    yield result
    synchronize()
    result["seconds"] = time.perf_counter() - start
    result["cpu_seconds"] = time.process_time() - cpu_start


def sst2_subset(train_size: int = 1000, max_length: int = 64, seed: int = 0):
    """A seeded SST-2 training subset and the whole validation split, tokenised with the
    offline encoder's tokenizer (columns input_ids, attention_mask, token_type_ids, labels)."""
    from ftcourse import data, models

    tokenizer = models.load_tokenizer()
    sst2 = data.load_sst2(full=True)
    splits = {"train": data.subsample(sst2["train"], train_size, seed=seed), "validation": sst2["validation"]}

    def tokenize(batch):
        return tokenizer(batch["sentence"], truncation=True, max_length=max_length)

    tokenised = {
        name: split.map(tokenize, batched=True, remove_columns=["sentence"]).rename_column("label", "labels")
        for name, split in splits.items()
    }
    return tokenised["train"], tokenised["validation"], tokenizer


def accuracy_noise(a: float, b: float, n: int) -> float:
    """Two standard errors of the difference of two accuracies on the same ``n`` examples
    (binomial, treating the runs as independent): differences below it are noise."""
    return 2 * ((a * (1 - a) + b * (1 - b)) / n) ** 0.5
