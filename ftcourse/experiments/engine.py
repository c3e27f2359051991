"""One engine: a declared run spec in, one record out.

A ``RunSpec`` says everything that decides a sentence-classification run beside its data: the
method (which parameters move), the learning rates, the steps (epochs of a batch size), the
recipe's tactics, the head's pooling, the precision and the seed. ``train_run`` builds
``head(method(copy of the encoder))``, trains it with ``training.train`` and scores it on every
split it is given; it returns a ``RunRecord``, the one record type every lesson reads.

Methods:

- every ``methods.METHOD_NAMES`` entry (``"frozen + linear head"``, ``"LoRA r=8"``,
  ``"full fine-tuning"``, BitFit, prompt tuning, (IA)³, DoRA);
- ``"k=N"``: the embeddings and the lower ``N`` layers frozen, the rest trained
  (``methods.freeze_lower``);
- ``"random init"``: full fine-tuning of the same architecture from fresh weights
  (``methods.reinitialized``).

Runs go through a store (``experiments.store``) so that a spec trains once per build.
"""

from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass, field, replace

import torch

from .. import heads, methods, training
from ..regimes import accuracy_on

FULL = "full fine-tuning"
FROZEN = methods.FROZEN
RANDOM_INIT = "random init"
_PARTIAL = re.compile(r"k=(\d+)$")


@dataclass(frozen=True)
class RunSpec:
    """One run, declared: what trains, how, and with which seed. The data are given beside it
    (the store keys a run by both)."""

    method: str
    lr: float
    seed: int = 0
    head_lr: float | None = None  # None: the head trains at ``lr`` (the frozen head's own sweep)
    epochs: int = 1
    batch_size: int = 16
    warmup_ratio: float = 0.1
    layer_decay: float | None = None
    pooling: str = "cls"
    precision: str = "fp32"
    task: str = "sst2"

    def __post_init__(self):
        known_method(self.method)

    def with_(self, **changes) -> "RunSpec":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunRecord:
    """What one run made: its spec, its scores on each split (``{split: {"accuracy": x}}``, in
    [0, 1]) and its costs. ``label`` is how a lesson names the run (not part of what it is)."""

    spec: RunSpec
    train_size: int
    scores: dict
    method_parameters: int  # the encoder's trainable parameters (the method's own)
    head_parameters: int
    total_parameters: int
    bytes_per_task: int  # what a task stores beside a shared frozen backbone (the whole model if nothing is frozen)
    seconds_per_epoch: float  # measured when it trained (a record read from the store keeps its own)
    peak_memory_bytes: int
    steps: int
    label: str = ""
    losses: tuple = field(default=(), repr=False)

    # The fields lessons read, by the names they have always had.
    method = property(lambda self: self.spec.method)
    setting = property(lambda self: self.label or self.spec.method)
    lr = property(lambda self: self.spec.lr)
    seed = property(lambda self: self.spec.seed)
    trainable = property(lambda self: self.method_parameters + self.head_parameters)
    validation = property(lambda self: self.score("validation"))
    dev = property(lambda self: self.score("dev"))
    accuracy = property(lambda self: self.score("dev"))

    @property
    def k(self) -> int | None:
        match = _PARTIAL.match(self.spec.method)
        return int(match.group(1)) if match else None

    def score(self, split: str = "dev", metric: str = "accuracy") -> float | None:
        return self.scores.get(split, {}).get(metric)

    def labelled(self, label: str) -> "RunRecord":
        """The same run, named as a lesson names it."""
        return replace(self, label=label)

    def as_dict(self) -> dict:
        return {**asdict(self), "spec": self.spec.as_dict(), "losses": list(self.losses)}

    @classmethod
    def from_dict(cls, d: dict) -> "RunRecord":
        d = dict(d)
        return cls(**{**d, "spec": RunSpec(**d["spec"]), "losses": tuple(d.get("losses", ()))})


def known_method(name: str) -> str:
    if name in methods.METHOD_NAMES or name == RANDOM_INIT or _PARTIAL.match(name):
        return name
    raise ValueError(f"Unknown method {name!r}. Known: {', '.join(methods.METHOD_NAMES)}, {RANDOM_INIT!r}, "
                     "or 'k=N' (the embeddings and the lower N layers frozen).")


def build_model(spec: RunSpec, encoder: torch.nn.Module, num_labels: int) -> heads.TaskModel:
    """``head(method(encoder))`` for ``spec``; ``encoder`` itself is never modified."""
    match = _PARTIAL.match(spec.method)
    if spec.method == RANDOM_INIT:
        backbone = methods.reinitialized(encoder, spec.seed)
        torch.manual_seed(spec.seed)
    elif match:
        torch.manual_seed(spec.seed)
        backbone = methods.freeze_lower(copy.deepcopy(encoder), int(match.group(1)))
    else:
        torch.manual_seed(spec.seed)  # the head's initialisation (and prompt tuning's vectors) follow the seed
        backbone = methods.method(spec.method).build(copy.deepcopy(encoder))
    head = heads.SentenceClassifier(encoder.config.hidden_size, num_labels, pooling=spec.pooling)
    return heads.TaskModel(backbone, head)


def train_config(spec: RunSpec) -> training.TrainConfig:
    return training.TrainConfig(lr=spec.lr, head_lr=spec.head_lr, epochs=spec.epochs, batch_size=spec.batch_size,
                                seed=spec.seed, warmup_ratio=spec.warmup_ratio, layer_decay=spec.layer_decay,
                                precision=spec.precision, progress=False)


def train_run(spec: RunSpec, encoder: torch.nn.Module, train, scored: dict, num_labels: int | None = None,
              keep_model: bool = False):
    """Train ``spec`` on ``train`` (a tokenised classification set) and score it on each split
    of ``scored`` (``{"validation": ..., "dev": ...}``). Returns a ``RunRecord`` (and the model
    when ``keep_model``)."""
    from ..regimes import num_labels_of

    if len(train) == 0:
        raise ValueError("The training split is empty. Fix: pass a training set with examples.")
    num_labels = num_labels or num_labels_of(train, *scored.values())
    model = build_model(spec, encoder, num_labels)
    with training.peak_memory() as peak:
        history = training.train(model, train, train_config(spec))
    method_parameters = sum(p.numel() for p in model.encoder.parameters() if p.requires_grad)
    head_parameters = sum(p.numel() for p in model.head.parameters() if p.requires_grad)
    counts = heads.count_parameters(model)
    stored = counts["total"] if counts["frozen"] == 0 else counts["trainable"]
    scores = {name: {"accuracy": accuracy_on(model, split)} for name, split in scored.items()}
    record = RunRecord(spec, len(train), scores, method_parameters, head_parameters, counts["total"], 4 * stored,
                       history.seconds_per_epoch, peak["bytes"], len(history.losses),
                       losses=tuple(round(float(x), 5) for x in history.losses))
    return (record, model) if keep_model else record


def by_seed(records, split: str = "dev", metric: str = "accuracy") -> dict:
    """``{seed: score}`` of ``records`` (one setting): what ``compare.paired`` pairs."""
    found = {}
    for record in records:
        if record.seed in found:
            raise ValueError(f"Two records of {record.setting!r} share seed {record.seed}: pass one setting's runs.")
        found[record.seed] = record.score(split, metric)
    return found
