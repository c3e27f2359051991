"""Speed yardsticks shared by pretraining, feature extraction and the benchmarks.

A throughput means little on its own (machines differ, and these ones are shared and
noisy), so the course always reports it as a fraction of what a plain fp32 matmul reaches
in the same process, measured moments apart.
"""

from __future__ import annotations

import time

import torch


def matmul_flops_per_second(size: int = 1024, seconds: float = 1.0, device="cpu") -> float:
    """The best FLOP/s a ``size`` x ``size`` fp32 matmul reaches on ``device`` within
    ``seconds`` (bursts of 4, best burst kept: the least disturbed reading of the limit)."""
    device = torch.device(device)
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    a @ b  # warm up: allocation, kernel choice
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        _synchronize(device)
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        _synchronize(device)
        best = max(best, 4 * 2 * size**3 / (time.perf_counter() - start))
    return best


def encoder_flops(model_config, tokens: int, mean_length: float) -> float:
    """Forward FLOPs of a BERT-like encoder over ``tokens`` tokens in sequences of
    ``mean_length`` (2 per multiply-add). Per token and layer:

    - Q, K, V and the attention output projections: 4 H x H matmuls -> 8 H^2
    - feed-forward, H x I then I x H -> 4 H I
    - attention's scores Q K^T and weighted sum of V -> 2 x 2 T H = 4 T H

    Embedding lookups, LayerNorm, softmax and GELU are not counted: they are memory-bound
    work the matmul limit does not measure, part of why the fraction stays below one.
    """
    hidden, layers = model_config.hidden_size, model_config.num_hidden_layers
    dense = 2 * (4 * hidden * hidden + 2 * hidden * model_config.intermediate_size)
    attention = 2 * 2 * mean_length * hidden
    return tokens * layers * (dense + attention)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
