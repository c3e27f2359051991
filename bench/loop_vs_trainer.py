"""ftcourse's training loop against ``transformers.Trainer``: same model, data, batch size,
epochs, learning-rate schedule and seed. Full fine-tuning of the offline encoder on an
SST-2 subset; wall time of training, and dev accuracy, of each.

Differences that remain, on purpose (each is what the tool does by default):

- ftcourse reads [CLS]'s final state; ``AutoModelForSequenceClassification`` passes it
  through BERT's pooler (dense + tanh) first: pretrained if the checkpoint has one
  (MiniLM does), randomly initialised if not (an MLM-only encoder).
- ftcourse batches sentences of similar length; the Trainer samples at random (its
  ``train_sampling_strategy="group_by_length"`` row shows the Trainer with bucketing too).
- Warmup steps are set equal; the Trainer's AdamW is fused, as is ftcourse's.
"""

from __future__ import annotations

import math
import tempfile
import time

import torch

from .common import Row, accuracy_noise, stopwatch, sst2_subset


def where_time_goes(model, loader, steps: int = 4, fused: bool = True) -> dict:
    """Seconds per step in each phase of a training step, over ``steps`` batches: the
    measurement that showed the optimiser (unfused AdamW) was the loop's largest cost."""
    from ftcourse import training

    optimizer = torch.optim.AdamW(training.parameter_groups(model, training.TrainConfig()), lr=1e-5, fused=fused)
    phases = dict.fromkeys(("batch", "forward", "backward", "clip", "optimizer"), 0.0)
    model.train()
    steps = min(steps, len(loader))
    batches = iter(loader)
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        loss = model(**batch)["loss"]
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t4 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            phases[name] += seconds / steps
    return phases


def _padding(batches) -> float:
    """Padded positions as a fraction of all positions."""
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    total = sum(b["attention_mask"].numel() for b in batches)
    return 1 - real / total


def run_ftcourse(train, dev, tokenizer, *, lr, epochs, batch_size, seed):
    from ftcourse import heads, models, training

    torch.manual_seed(seed)
    encoder = models.load_encoder(add_pooling_layer=False)
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))
    config = training.TrainConfig(lr=lr, epochs=epochs, batch_size=batch_size, seed=seed, progress=False)
    with stopwatch() as fit:
        history = training.train(model, train, config, pad_token_id=tokenizer.pad_token_id)
    with stopwatch() as evaluation:
        logits, labels = training.predict(model, dev, pad_token_id=tokenizer.pad_token_id)
    padding = _padding(training.make_loader(train, batch_size, shuffle=True, seed=seed, pad_token_id=tokenizer.pad_token_id))
    return {"train_s": fit["seconds"], "cpu_s": fit["cpu_seconds"], "epoch_s": history.seconds_per_epoch, "eval_s": evaluation["seconds"],
            "accuracy": training.accuracy(logits, labels)["accuracy"], "padding": padding}


def run_trainer(train, dev, tokenizer, *, lr, epochs, batch_size, seed, sampling="random"):
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments

    from ftcourse import models

    torch.manual_seed(seed)
    model = models.load_encoder(model_class=AutoModelForSequenceClassification, num_labels=2)
    steps = math.ceil(len(train) / batch_size) * epochs
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir, report_to=[], per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=128, num_train_epochs=epochs, learning_rate=lr, weight_decay=0.01,
            warmup_steps=int(0.1 * steps),  # ftcourse's int(warmup_ratio * steps), exactly
            lr_scheduler_type="linear", max_grad_norm=1.0, seed=seed, save_strategy="no", eval_strategy="no",
            logging_strategy="no", disable_tqdm=True, use_cpu=not torch.cuda.is_available(),
            train_sampling_strategy=sampling,
        )
        trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer))
        with stopwatch() as fit:
            trainer.train()
        with stopwatch() as evaluation:
            output = trainer.predict(dev)
        padding = _padding(list(trainer.get_train_dataloader()))
    accuracy = float((output.predictions.argmax(-1) == output.label_ids).mean())
    return {"train_s": fit["seconds"], "cpu_s": fit["cpu_seconds"], "epoch_s": fit["seconds"] / epochs, "eval_s": evaluation["seconds"],
            "accuracy": accuracy, "padding": padding}


def _warm_up(tokenizer) -> None:
    """One forward and backward pass first, so neither contender pays the one-time start-up
    (thread pools, kernel selection) inside its timing."""
    from ftcourse import models

    model = models.load_encoder(add_pooling_layer=False)
    batch = tokenizer(["a warm-up sentence of a few words"] * 32, return_tensors="pt", padding="max_length", max_length=32)
    model(**batch).last_hidden_state.sum().backward()


def main(train_size: int = 1000, max_length: int = 64, epochs: int = 1, batch_size: int = 32, seed: int = 0,
         lr: float | None = None, repeats: int = 1, group_by_length: bool = True) -> tuple[list[Row], dict]:
    from ftcourse import config, heads, models, training

    lr = lr or config.get_profile().finetune_lr
    train, dev, tokenizer = sst2_subset(train_size, max_length, seed)
    print(f"== training loop: ftcourse vs transformers.Trainer ==\n"
          f"full fine-tuning of the offline encoder on {len(train)} SST-2 sentences, "
          f"max_length {max_length}, batch {batch_size}, {epochs} epoch(s), lr {lr:g}, seed {seed}; "
          f"dev accuracy on all {len(dev)} validation sentences")
    _warm_up(tokenizer)

    encoder = models.load_encoder(add_pooling_layer=False)
    probe = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))
    loader = training.make_loader(train, batch_size, shuffle=True, seed=seed, pad_token_id=tokenizer.pad_token_id)
    print("where a training step's time goes (seconds per step, first batches of the epoch):")
    for fused in (False, True):
        phases = where_time_goes(probe, loader, fused=fused)
        total = sum(phases.values())
        print(f"  AdamW {'fused    ' if fused else 'per-tensor'}: " + ", ".join(
            f"{name} {seconds:.3f} ({seconds / total:.0%})" for name, seconds in phases.items()) + f"; total {total:.3f}")
    del probe, encoder

    contenders = {"ftcourse": lambda: run_ftcourse(train, dev, tokenizer, lr=lr, epochs=epochs, batch_size=batch_size, seed=seed),
                  "Trainer": lambda: run_trainer(train, dev, tokenizer, lr=lr, epochs=epochs, batch_size=batch_size, seed=seed)}
    if group_by_length:
        contenders["Trainer group_by_length"] = lambda: run_trainer(
            train, dev, tokenizer, lr=lr, epochs=epochs, batch_size=batch_size, seed=seed, sampling="group_by_length")
    results: dict[str, dict] = {}
    for repeat in range(repeats):  # interleaved, so a change in the machine's load hits every contender
        for name, run in contenders.items():
            result = run()
            if name in results:  # keep the fastest time; accuracy is the same run to run
                result["train_s"] = min(result["train_s"], results[name]["train_s"])
                result["cpu_s"] = min(result["cpu_s"], results[name]["cpu_s"])
            results[name] = result
    print(f"{'':<24} {'train s':>8} {'CPU s':>7} {'eval s':>7} {'padding':>8} {'dev acc':>8}")
    for name, r in results.items():
        print(f"{name:<24} {r['train_s']:8.1f} {r['cpu_s']:7.1f} {r['eval_s']:7.1f} {r['padding']:8.1%} {r['accuracy']:8.3f}")

    # Achieved training FLOP/s: a step's backward costs about twice its forward, so 3x the
    # forward FLOPs of the real (unpadded) tokens, against the same process's matmul limit.
    from ftcourse import speed

    lengths = [len(ids) for ids in train["input_ids"]]
    real_tokens = sum(lengths) * epochs
    train_flops = 3 * speed.encoder_flops(models.load_encoder(add_pooling_layer=False).config, real_tokens,
                                          sum(lengths) / len(lengths))
    matmul = speed.matmul_flops_per_second(device="cuda" if torch.cuda.is_available() else "cpu")
    achieved = {name: train_flops / r["train_s"] for name, r in results.items()}
    for name, flops in achieved.items():
        print(f"{name}: {real_tokens / results[name]['train_s']:,.0f} real tokens/s trained, {flops / 1e9:.1f} GFLOP/s "
              f"= {flops / matmul:.2f} of the fp32 matmul's {matmul / 1e9:.1f} GFLOP/s")

    ours, theirs = results["ftcourse"], results["Trainer"]
    speedup = theirs["train_s"] / ours["train_s"]
    cpu_speedup = theirs["cpu_s"] / ours["cpu_s"]
    gap = ours["accuracy"] - theirs["accuracy"]
    noise = accuracy_noise(ours["accuracy"], theirs["accuracy"], len(dev))
    print(f"Trainer time / ftcourse time: {speedup:.2f} (target >= 1: {'met' if speedup >= 1 else 'missed'}); "
          f"in CPU time {cpu_speedup:.2f}")
    print(f"dev accuracy ftcourse - Trainer: {gap:+.3f}; noise (2 s.e.) {noise:.3f}: "
          f"{'equal within noise' if abs(gap) <= noise else 'differs by more than noise'}")
    rows = [
        Row("Trainer time / ftcourse time (training)", f"{speedup:.2f}", ">= 1", speedup >= 1,
            f"{theirs['train_s']:.0f} s vs {ours['train_s']:.0f} s; padding {theirs['padding']:.0%} vs {ours['padding']:.0%}"),
        Row("Trainer CPU time / ftcourse CPU time (training)", f"{cpu_speedup:.2f}", ">= 1", cpu_speedup >= 1,
            f"{theirs['cpu_s']:.0f} s vs {ours['cpu_s']:.0f} s: robust to other jobs' load when threads = 1"),
        Row("dev accuracy, ftcourse - Trainer", f"{gap:+.3f}", f"within noise (±{noise:.3f})", abs(gap) <= noise,
            f"{ours['accuracy']:.3f} vs {theirs['accuracy']:.3f}"),
    ]
    rows += [Row(f"{name} training FLOP/s / fp32 matmul FLOP/s", f"{achieved[name] / matmul:.2f}",
                 ">= 0.5" if name == "ftcourse" else "", achieved[name] / matmul >= 0.5 if name == "ftcourse" else None,
                 f"{real_tokens / results[name]['train_s']:,.0f} real tokens/s x 3 x "
                 f"{train_flops / 3 / real_tokens / 1e6:.1f} MFLOP/token vs {matmul / 1e9:.0f} GFLOP/s matmul")
             for name in ("ftcourse", "Trainer")]
    if group_by_length:
        grouped = results["Trainer group_by_length"]
        ratio = grouped["train_s"] / ours["train_s"]
        print(f"Trainer (group_by_length) time / ftcourse time: {ratio:.2f}")
        rows.append(Row("Trainer group_by_length time / ftcourse time", f"{ratio:.2f}", "", None,
                        f"{grouped['train_s']:.0f} s; dev accuracy {grouped['accuracy']:.3f}"))
    return rows, {"finetune_epoch_s": ours["epoch_s"], "train": train, "dev": dev, "tokenizer": tokenizer}
