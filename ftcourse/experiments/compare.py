"""Verdicts against the noise: "A beats B" is decided by the paired difference over seeds.

Two settings trained with the same seeds (and the same subsets) are compared seed by seed:
``d_s = A_s - B_s``. The verdict reads the mean of the ``d_s`` and its Student-t interval
(``confidence``, 95% by default, ``n - 1`` degrees of freedom):

- the interval lies above zero: **A beats B**; below zero: **B beats A**;
- the interval holds zero: **tie (n seeds)**; the difference is not resolved by this many seeds;
- one seed: **undecided (1 seed)**; one run has no spread to read a verdict against.

Pairing removes what the seeds share (the subset drawn, the head's initialisation, the data
order), so a paired interval is narrower than one built from the two spreads apart; that is
why the runs a verdict reads share their seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONFIDENCE = 0.95
SCALE = 100.0  # accuracies in [0, 1] are compared in points


class IntervalVerdict:
    """The one reading of every verdict: an interval of the difference ``a - b``, in points.
    Above zero, ``a`` beats ``b``; below, ``b`` beats ``a``; holding zero, a tie; with no
    interval to read (one seed), undecided. A subclass says what the interval is over
    (``detail``, ``basis``) and whether there is one (``decided``)."""

    decided = True

    @property
    def outcome(self) -> str:
        """``"beats"`` (a over b), ``"trails"`` (b over a), ``"tie"`` or ``"undecided"``."""
        if not self.decided:
            return "undecided"
        if self.low > 0:
            return "beats"
        if self.high < 0:
            return "trails"
        return "tie"

    @property
    def verdict(self) -> str:
        """One line: who wins, by how much, and the interval that decides it."""
        if self.outcome == "beats":
            return f"{self.a} beats {self.b}: {self.detail}"
        if self.outcome == "trails":
            return f"{self.b} beats {self.a}: {self.detail}"
        return f"{self.outcome} ({self.basis}): {self.detail}"

    def __str__(self) -> str:
        return self.verdict


@dataclass(frozen=True)
class Comparison(IntervalVerdict):
    """``a`` against ``b``: the per-seed differences (in points), their mean and interval."""

    a: str
    b: str
    differences: tuple  # a - b per paired seed, in points
    seeds: tuple
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def decided(self) -> bool:
        return self.n >= 2

    @property
    def mean(self) -> float:
        return sum(self.differences) / self.n

    @property
    def basis(self) -> str:
        return f"{self.n} seed{'s' if self.n != 1 else ''}"

    @property
    def interval(self) -> str:
        if self.n < 2:
            return "no interval"
        return f"{self.confidence:.0%} CI {self.low:+.1f} to {self.high:+.1f}"

    @property
    def detail(self) -> str:
        return f"{self.a} - {self.b} = {self.mean:+.1f} points ({self.interval}, {self.basis})"

    def within(self, margin: float) -> str:
        """Whether ``a`` stays within ``margin`` points under ``b``: ``"yes"`` when the whole
        interval lies above ``-margin``, ``"no"`` when it lies below, else ``"undecided"``."""
        if self.n < 2:
            return "undecided"
        if self.low > -margin:
            return "yes"
        if self.high < -margin:
            return "no"
        return "undecided"


def t_quantile(confidence: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df))


def paired(a: dict, b: dict, a_name: str = "A", b_name: str = "B", scale: float = SCALE,
           confidence: float = CONFIDENCE) -> Comparison:
    """Compare ``a`` and ``b``, each ``{seed: score}``, over the seeds they share.

    Raises ``ValueError`` when they share none: an unpaired comparison is not a verdict this
    course reads (train both with the same seeds)."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError(f"{a_name} (seeds {sorted(a)}) and {b_name} (seeds {sorted(b)}) share no seed, so there "
                         "is nothing to pair. Fix: train both with the same seeds.")
    differences = tuple(scale * (a[s] - b[s]) for s in seeds)
    _, low, high = mean_interval(differences, 1.0, confidence)  # the paired differences' own interval
    return Comparison(a_name, b_name, differences, seeds, low, high, confidence)


def mean_interval(values, scale: float = SCALE, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """The mean of ``values`` (scaled) and its Student-t interval: ``(mean, low, high)``."""
    values = [scale * v for v in values]
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = t_quantile(confidence, len(values) - 1) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def summarize(records, split: str = "dev", metric: str = "accuracy", confidence: float = CONFIDENCE) -> dict:
    """``{setting: summary}`` over seeds: ``mean`` and ``std`` (in the metric's own scale),
    ``low``/``high`` (the mean's interval, same scale), ``n``, ``seeds``, and the first run's
    costs (``trainable``, ``bytes_per_task``, ``steps``, ``lr``; ``seconds_per_epoch`` and
    ``peak_memory_bytes`` averaged and maxed over the seeds)."""
    groups: dict = {}
    for record in records:
        groups.setdefault(record.setting, []).append(record)
    summary = {}
    for setting, group in groups.items():
        values = [r.score(split, metric) for r in group]
        mean, low, high = mean_interval(values, 1.0, confidence)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        first = group[0]
        summary[setting] = {
            "mean": mean, "std": std, "low": low, "high": high, "n": len(group),
            "seeds": tuple(r.seed for r in group), "lr": first.lr, "steps": first.steps, "k": first.k,
            "trainable": first.trainable, "method_parameters": first.method_parameters,
            "head_parameters": first.head_parameters, "bytes_per_task": first.bytes_per_task,
            "seconds_per_epoch": sum(r.seconds_per_epoch for r in group) / len(group),
            "peak_memory_bytes": max(r.peak_memory_bytes for r in group), "train_size": first.train_size,
        }
    return summary
