"""The standard levers on this CPU, each against its baseline in the same process: thread
count, ``torch.compile``, and padding to a multiple of a bucket size at the tokenizer. Each
row is kept in the course only where it pays (bench/README.md says which).

The work is the offline encoder's full fine-tuning step (forward, backward, clipping, fused
AdamW) with a sentence head: on a fixed batch for threads and compile, over an epoch of real
SST-2 batches (length-bucketed as ``training.make_loader`` makes them) for padding.
"""

from __future__ import annotations

import time

import torch

from .common import Row, sst2_subset


def _model():
    from ftcourse import heads, models

    torch.manual_seed(0)
    encoder = models.load_encoder(add_pooling_layer=False)
    return heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))


def _step(model, optimizer, batch):
    loss = model(**batch)["loss"]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def fixed_batch(batch_size: int = 32, tokens: int = 48) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(1000, 20000, (batch_size, tokens), generator=generator),
            "attention_mask": torch.ones(batch_size, tokens, dtype=torch.long),
            "labels": torch.randint(0, 2, (batch_size,), generator=generator)}


def best_step(model, batch, steps: int = 6) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    _step(model, optimizer, batch)  # warm-up (and, compiled, the compilation)
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        _step(model, optimizer, batch)
        best = min(best, time.perf_counter() - start)
    return best


def threads_row() -> Row:
    before = torch.get_num_threads()
    cores = max(1, torch.get_num_threads())
    batch = fixed_batch()
    torch.set_num_threads(1)
    one = best_step(_model(), batch)
    torch.set_num_threads(max(2, cores))
    many = best_step(_model(), batch)
    torch.set_num_threads(before)
    return Row(f"training step, 1 thread / {max(2, cores)} threads", f"{one / many:.2f}x", "", None,
               f"{one * 1000:.0f} ms vs {many * 1000:.0f} ms (batch 32 x 48): why make course runs two one-thread kernels")


def compile_rows() -> list[Row]:
    import shutil

    if not (shutil.which("g++") or shutil.which("c++")):
        return [Row("torch.compile", "not run", "", None, "no C++ compiler on PATH (inductor needs one)")]
    batch = fixed_batch()
    eager = best_step(_model(), batch)
    model = _model()
    start = time.perf_counter()
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    _step(compiled, optimizer, batch)
    first = time.perf_counter() - start
    fast = best_step(compiled, batch)
    return [Row("torch.compile step speed-up (fixed shape)", f"{eager / fast:.2f}x", "", None,
                f"eager {eager * 1000:.0f} ms, compiled {fast * 1000:.0f} ms; compiling took {first:.0f} s "
                f"= {first / max(eager - fast, 1e-9):.0f} steps' saving" if fast < eager else
                f"eager {eager * 1000:.0f} ms, compiled {fast * 1000:.0f} ms; compiling took {first:.0f} s")]


def padding_rows(train_size: int = 1000, multiple: int = 16) -> list[Row]:
    from ftcourse import training

    train, _, tokenizer = sst2_subset(train_size, 64, 0)
    rows, times = [], {}
    for label, pad_to in (("exact", None), (f"multiple of {multiple}", multiple)):
        loader = training.make_loader(train, 32, shuffle=True, seed=0, pad_token_id=tokenizer.pad_token_id)
        batches = []
        for batch in loader:
            if pad_to:
                width = -(-batch["input_ids"].shape[1] // pad_to) * pad_to
                extra = width - batch["input_ids"].shape[1]
                batch = {k: torch.nn.functional.pad(v, (0, extra), value=tokenizer.pad_token_id if k == "input_ids" else 0)
                         if v.dim() == 2 else v for k, v in batch.items()}
            batches.append(batch)
        model = _model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
        _step(model, optimizer, batches[0])
        start = time.perf_counter()
        for batch in batches:
            _step(model, optimizer, batch)
        times[label] = time.perf_counter() - start
        padded = 1 - sum(int(b["attention_mask"].sum()) for b in batches) / sum(b["attention_mask"].numel() for b in batches)
        shapes = len({tuple(b["input_ids"].shape) for b in batches})
        rows.append(Row(f"an epoch, padding {label}", f"{times[label]:.1f} s", "", None,
                        f"{len(batches)} batches, {padded:.0%} padded positions, {shapes} distinct shapes"))
    exact, bucketed = times["exact"], times[f"multiple of {multiple}"]
    rows.append(Row(f"padding to a multiple of {multiple} / exact", f"{bucketed / exact:.2f}x", "", None,
                    "time of the same epoch; above 1 means the extra padding costs more than fewer shapes save"))
    return rows


def main(train_size: int = 1000) -> list[Row]:
    rows = [threads_row()]
    rows += compile_rows()
    rows += padding_rows(train_size)
    return rows
