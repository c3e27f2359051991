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
