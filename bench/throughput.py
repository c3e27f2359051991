"""Encoder forward throughput against the machine's own fp32 matmul speed.

Model FLOPs per token are counted by ``ftcourse.speed.encoder_flops`` (its docstring
says what is and is not counted).
"""

from __future__ import annotations

import time

import torch

from .common import Row, device, synchronize


def best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: allocation, kernel choice
    best = float("inf")
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def packed_batch(tokenizer, batch_size: int, sequence_length: int) -> dict:
    """Real SST-2 text packed into full rows: every position is a real token, no padding."""
    from ftcourse import data

    sentences = data.load_sst2(full=True)["validation"]["sentence"]
    ids = [i for s in sentences for i in tokenizer(s, add_special_tokens=False)["input_ids"]]
    needed = batch_size * (sequence_length - 2)
    ids = (ids * (needed // len(ids) + 1))[:needed]
    rows = torch.tensor(ids).view(batch_size, sequence_length - 2)
    cls = torch.full((batch_size, 1), tokenizer.cls_token_id)
    sep = torch.full((batch_size, 1), tokenizer.sep_token_id)
    input_ids = torch.cat([cls, rows, sep], dim=1)
    return {"input_ids": input_ids.to(device()), "attention_mask": torch.ones_like(input_ids).to(device())}


def main(batch_size: int = 32, sequence_length: int = 128, rounds: int = 3, repeats: int = 3) -> list[Row]:
    from ftcourse import models, speed

    tokenizer = models.load_tokenizer()
    encoder = models.load_encoder(add_pooling_layer=False).to(device()).eval()
    batch = packed_batch(tokenizer, batch_size, sequence_length)
    tokens = batch["input_ids"].numel()
    per_token = speed.encoder_flops(encoder.config, 1, sequence_length)
    c = encoder.config
    print(f"\n== encoder forward throughput vs fp32 matmul ==\n"
          f"encoder: {c.num_hidden_layers} layers, hidden {c.hidden_size}, feed-forward {c.intermediate_size}, "
          f"attention {getattr(c, '_attn_implementation', '?')}; batch {batch_size} x {sequence_length} tokens "
          f"(packed, no padding), torch.inference_mode, fp32")
    print(f"model FLOPs per token counted: {per_token / 1e6:.2f} M "
          f"(L (8H^2 + 4HI + 4TH); 2 x non-embedding parameters = "
          f"{2 * sum(p.numel() for n, p in encoder.named_parameters() if 'embeddings' not in n) / 1e6:.2f} M)")

    def forward():
        with torch.inference_mode():
            encoder(**batch)

    # Interleaved rounds: the matmul limit and the model are measured under the same load.
    best_matmul, best_model = 0.0, 0.0
    for _ in range(rounds):
        best_matmul = max(best_matmul, speed.matmul_flops_per_second(device=device()))
        best_model = max(best_model, tokens / best_seconds(forward, repeats))
    fraction = best_model * per_token / best_matmul
    print(f"matmul: {best_matmul / 1e9:.1f} GFLOP/s; encoder: {best_model:,.0f} tokens/s = "
          f"{best_model * per_token / 1e9:.1f} GFLOP/s; fraction of the matmul limit: {fraction:.2f} "
          f"(target >= 0.5: {'met' if fraction >= 0.5 else 'missed'})")
    return [Row("encoder forward FLOP/s / fp32 matmul FLOP/s", f"{fraction:.2f}", ">= 0.5", fraction >= 0.5,
                f"{best_model:,.0f} tokens/s x {per_token / 1e6:.1f} MFLOP/token vs {best_matmul / 1e9:.0f} GFLOP/s matmul")]
