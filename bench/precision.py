"""fp32 against bf16 autocast on the same work, in one process: the matmul of each dtype,
a training step of the offline encoder, and dev accuracy over three seeds.

bf16 pays only where the CPU computes it natively (AVX-512 BF16 or AMX; ``training.
cpu_has_native_bf16`` reads the flags). Elsewhere torch emulates it, many times slower than
fp32: then the matmuls are measured to show it, and the training runs are skipped (each would
take an hour), which is why ``precision="auto"`` keeps such a machine on fp32.
"""

from __future__ import annotations

import statistics
import time

import torch

from .common import Row, sst2_subset, stopwatch

SEEDS = (0, 1, 2)


def matmul_flops(dtype, size: int = 1024, seconds: float = 1.0) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def step_seconds(precision: str, batch_size: int = 32, tokens: int = 48, steps: int = 5) -> float:
    """The best training step (forward, backward, clip, fused AdamW) of the offline encoder
    with a head, on a full batch of ``tokens`` real positions."""
    from ftcourse import heads, models, training

    torch.manual_seed(0)
    encoder = models.load_encoder(add_pooling_layer=False)
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    batch = {"input_ids": torch.randint(1000, 20000, (batch_size, tokens)),
             "attention_mask": torch.ones(batch_size, tokens, dtype=torch.long),
             "labels": torch.randint(0, 2, (batch_size,))}
    best = float("inf")
    for _ in range(steps + 1):  # the first is a warm-up
        start = time.perf_counter()
        with training.autocast(precision, "cpu"):
            loss = model(**batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        best = min(best, time.perf_counter() - start)
    return best


def dev_accuracy(precision: str, seed: int, train_size: int = 1000) -> tuple[float, float]:
    from ftcourse import config, heads, models, training

    train, dev, tokenizer = sst2_subset(train_size, 64, seed)
    torch.manual_seed(seed)
    encoder = models.load_encoder(add_pooling_layer=False)
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))
    settings = training.TrainConfig(lr=config.get_profile().finetune_lr, seed=seed, progress=False, precision=precision)
    with stopwatch() as fit:
        training.train(model, train, settings, pad_token_id=tokenizer.pad_token_id)
    logits, labels = training.predict(model, dev, pad_token_id=tokenizer.pad_token_id, precision=precision)
    return training.accuracy(logits, labels)["accuracy"], fit["seconds"]


def main(train_size: int = 1000) -> list[Row]:
    from ftcourse import speed, training

    native = training.cpu_has_native_bf16()
    fp32, bf16 = matmul_flops(torch.float32), matmul_flops(torch.bfloat16)
    print(f"matmul 1024^2: fp32 {fp32 / 1e9:.1f} GFLOP/s, bf16 {bf16 / 1e9:.1f} GFLOP/s "
          f"({'native' if native else 'emulated: no avx512_bf16 or amx_bf16 in the CPU flags'})")
    rows = [Row("bf16 / fp32 matmul FLOP/s (1024^2)", f"{bf16 / fp32:.2f}x", "", None,
                f"fp32 {fp32 / 1e9:.1f}, bf16 {bf16 / 1e9:.1f} GFLOP/s; bf16 units: {'yes' if native else 'no'}")]
    if not native:
        rows.append(Row("bf16 training", "not run", "", None,
                        "bf16 is emulated on this CPU, so precision='auto' stays fp32 here and the lessons run fp32"))
        return rows
    from ftcourse import models

    # A training step is about 3x the forward's FLOPs (the backward pass is twice the forward).
    flops_per_step = 3 * speed.encoder_flops(models.load_encoder().config, 32 * 48, 48)
    steps = {p: step_seconds(p) for p in ("fp32", "bf16")}
    for precision, matmul in (("fp32", fp32), ("bf16", bf16)):
        tokens = 32 * 48 / steps[precision]
        share = f", {flops_per_step / steps[precision] / matmul:.2f} of its dtype's matmul FLOP/s"
        rows.append(Row(f"training step, {precision}", f"{steps[precision] * 1000:.0f} ms", "", None,
                        f"batch 32 x 48 tokens: {tokens:,.0f} tokens/s{share}"))
    rows.append(Row("bf16 step speed-up", f"{steps['fp32'] / steps['bf16']:.2f}x", "", None, "same work, same process"))
    runs = {p: [dev_accuracy(p, seed, train_size) for seed in SEEDS] for p in ("fp32", "bf16")}
    for precision, found in runs.items():
        scores = [a for a, _ in found]
        rows.append(Row(f"dev accuracy, {precision}", f"{statistics.mean(scores):.3f} +- {statistics.stdev(scores):.3f}",
                        "", None, f"seeds {SEEDS}: " + " ".join(f"{a:.3f}" for a in scores)
                        + f"; {statistics.mean(s for _, s in found):.0f} s per run"))
    return rows
