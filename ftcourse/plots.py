"""Small matplotlib figures shared by the lessons."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def smooth(values, window: int = 10):
    """A running mean, so a noisy per-step loss shows its trend."""
    values = np.asarray(values, dtype=float)
    if len(values) < window:
        return values
    return np.convolve(values, np.ones(window) / window, mode="valid")


def loss_curves(histories: dict, window: int = 10, title: str = "training loss"):
    """One smoothed loss curve per run: ``{"frozen": history, "finetune": history}``."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, history in histories.items():
        curve = smooth(history.losses, window)
        ax.plot(np.arange(len(curve)) + window // 2, curve, label=name)
    ax.set(xlabel="optimiser step", ylabel=f"loss (running mean of {window})", title=title)
    ax.legend()
    fig.tight_layout()
    return fig


def compare_bars(measured: dict, published: dict | None = None, ylabel: str = "", title: str = ""):
    """Measured beside published, one pair of bars per row name."""
    names = list(measured)
    x = np.arange(len(names))
    width = 0.4 if published else 0.8
    fig, ax = plt.subplots(figsize=(max(6, len(names) * 0.9), 3.5))
    ax.bar(x - (width / 2 if published else 0), [measured[n] for n in names], width, label="measured")
    if published:
        ax.bar(x + width / 2, [published.get(n, np.nan) for n in names], width, label="published")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set(ylabel=ylabel, title=title)
    ax.legend()
    fig.tight_layout()
    return fig
