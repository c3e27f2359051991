"""The transfer recipe as one small training loop.

AdamW (lr 2e-5, weight decay 0.01, none on biases and LayerNorm), linear warmup then
linear decay, gradient clipping at 1.0, optional layer-wise learning-rate decay. It runs
under Hugging Face ``accelerate``, so the same code trains on a CPU, a GPU, or several
processes started with ``accelerate launch``.

Speed comes from the data, not the loop: batches hold sentences of similar length
(length-bucketed), padded only to the longest in the batch, and evaluation runs under
``torch.inference_mode`` sorted by length.
"""

from __future__ import annotations

import math
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial

import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from .heads import IGNORE_INDEX

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SCHEDULES = ("linear", "constant")
PRECISIONS = ("fp32", "bf16", "fp16", "auto")
#: CPU flags (Linux /proc/cpuinfo) of units that compute bf16 natively: AVX-512 BF16, AMX.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bf16 matmuls natively (AVX-512 BF16 or AMX). Without such
    units bf16 autocast is emulated and slower than fp32, so "auto" never picks it there."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:  # not Linux: no way to tell here, so no
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def autocast_precision(precision: str, device) -> str:
    """What ``precision`` means on ``device``: "auto" becomes bf16 or fp16 where the hardware
    has them (a GPU: bf16 if supported, else fp16; a CPU: bf16 with native units), else fp32.
    fp16 is refused on a CPU, which has no fast fp16 path."""
    device = torch.device(device)
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "bf16" if device.type == "cpu" and cpu_has_native_bf16() else "fp32"
    if precision == "fp16" and device.type == "cpu":
        raise ValueError("fp16 autocast has no fast path on a CPU. Fix: precision='bf16' (or 'auto').")
    return precision


@contextmanager
def autocast(precision: str, device):
    """``torch.autocast`` at ``precision`` ("fp32": nothing changes), for inference."""
    precision = autocast_precision(precision, device)
    if precision == "fp32":
        yield
        return
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    with torch.autocast(torch.device(device).type, dtype=dtype):
        yield


@dataclass
class TrainConfig:
    """The knobs of the recipe; the defaults are the BERT paper's fine-tuning settings."""

    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1  # fraction of all steps spent warming up (0 = no warmup)
    max_grad_norm: float | None = 1.0  # None = no clipping
    epochs: int = 1
    batch_size: int = 32
    layer_decay: float | None = None  # e.g. 0.9: each layer down gets 0.9x the lr above it
    head_lr: float | None = None  # the head's own lr (None = lr)
    seed: int = 0
    eval_batch_size: int = 128
    progress: bool = True
    # "fp32", "bf16" or "fp16" (autocast: weights and optimiser stay fp32), or "auto": bf16
    # where the hardware computes it natively (a GPU with bf16, else fp16; a CPU with
    # AVX-512 BF16 or AMX), fp32 elsewhere. See ``autocast_precision``.
    precision: str = "fp32"
    # What the package adds to the course text's loop, each a switch so that lesson 1 can
    # measure what it buys: "linear" warms up then decays to zero, "constant" keeps lr
    # throughout; batches of similar length (little padding) or plain shuffled ones; one fused
    # AdamW kernel or torch's per-tensor loop; no weight decay on biases and LayerNorm weights.
    schedule: str = "linear"
    length_bucketing: bool = True
    fused_adamw: bool = True
    decay_exemptions: bool = True

    def __post_init__(self):
        if self.lr <= 0 or (self.head_lr is not None and self.head_lr <= 0):
            raise ValueError(f"learning rates must be positive, got lr={self.lr}, head_lr={self.head_lr}.")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}.")
        if self.layer_decay is not None and not 0 < self.layer_decay <= 1:
            raise ValueError(f"layer_decay must be in (0, 1], got {self.layer_decay}.")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be at least 1, got {self.epochs}, {self.batch_size}.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"Unknown precision {self.precision!r}. Known: {', '.join(PRECISIONS)}.")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"Unknown schedule {self.schedule!r}. Known: {', '.join(SCHEDULES)}.")


@dataclass
class History:
    """What a run leaves behind for plots and tables."""

    losses: list = field(default_factory=list)  # one per optimiser step
    learning_rates: list = field(default_factory=list)
    epoch_seconds: list = field(default_factory=list)
    metrics: list = field(default_factory=list)  # one dict per epoch, if eval data was given
    examples_seen: int = 0

    @property
    def seconds_per_epoch(self) -> float:
        return sum(self.epoch_seconds) / max(len(self.epoch_seconds), 1)


# ----------------------------------------------------------------------------- batches


def collate(features: list[dict], pad_token_id: int = 0) -> dict:
    """Pad a list of tokenised examples to the longest one: ids with the pad id, the
    attention mask and token types with 0, per-token labels with ``IGNORE_INDEX``."""
    batch = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if key in MODEL_INPUTS:
            pad = pad_token_id if key == "input_ids" else 0
            batch[key] = pad_sequence([torch.as_tensor(v) for v in values], batch_first=True, padding_value=pad)
        elif key == "labels" and _per_token(features[0]):
            batch[key] = pad_sequence([torch.as_tensor(v) for v in values], batch_first=True, padding_value=IGNORE_INDEX)
        elif key == "labels":  # one label (or one (start, end) pair) per example
            batch[key] = torch.as_tensor(values)
    return batch


def _per_token(example: dict) -> bool:
    """Tagging labels have one entry per token; sentence and span labels do not."""
    labels = example["labels"]
    return isinstance(labels, (list, tuple)) and len(labels) == len(example["input_ids"])


def length_bucketed_batches(lengths, batch_size: int, shuffle: bool, seed: int = 0, bucket_factor: int = 50):
    """Index batches of similar length. Shuffled: random pools of ``bucket_factor``
    batches are each sorted by length, then the batch order is shuffled, so batches are
    random but carry little padding. Not shuffled: longest first, for evaluation."""
    lengths = torch.as_tensor(lengths)
    if not shuffle:
        order = torch.argsort(lengths, descending=True, stable=True).tolist()
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(lengths), generator=generator)
    pool = batch_size * bucket_factor
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[torch.argsort(lengths[chunk], descending=True, stable=True)].tolist()
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    permutation = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in permutation]


class BucketBatchSampler(torch.utils.data.Sampler):
    """A batch sampler over ``length_bucketed_batches``; reshuffles each epoch.

    With ``num_shards`` > 1 (one shard per process of a distributed run), every process
    builds the same batches from the same seed and keeps every ``num_shards``-th one,
    starting at ``shard``. The batch count is first made a multiple of ``num_shards`` by
    halving the largest batches, so the processes take the same number of steps and
    together see every example exactly once per epoch: nothing is dropped or repeated
    (unlike ``accelerate``'s default sharding, which pads the last round with repeats).
    """

    def __init__(self, lengths, batch_size: int, shuffle: bool = True, seed: int = 0,
                 num_shards: int = 1, shard: int = 0, bucket_factor: int = 50):
        if not 0 <= shard < num_shards:
            raise ValueError(f"shard must be in [0, num_shards={num_shards}), got {shard}.")
        self.lengths, self.batch_size, self.shuffle, self.seed = list(lengths), batch_size, shuffle, seed
        self.num_shards, self.shard, self.bucket_factor = num_shards, shard, bucket_factor
        self.epoch = 0
        if len(self.lengths) < self._padded_count():
            raise ValueError(
                f"{len(self.lengths)} examples cannot give each of {num_shards} processes the same "
                f"number of batches of batch size {batch_size}: use fewer processes or more data."
            )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _padded_count(self) -> int:
        batches = math.ceil(len(self.lengths) / self.batch_size)
        return math.ceil(batches / self.num_shards) * self.num_shards

    def __iter__(self):
        batches = length_bucketed_batches(self.lengths, self.batch_size, self.shuffle, self.seed + self.epoch,
                                          self.bucket_factor)
        while len(batches) < self._padded_count():  # at most num_shards - 1 splits
            largest = max(range(len(batches)), key=lambda i: len(batches[i]))
            batch = batches[largest]
            batches[largest : largest + 1] = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
        yield from batches[self.shard :: self.num_shards]

    def __len__(self):
        return self._padded_count() // self.num_shards


def make_loader(dataset, batch_size: int, shuffle: bool, seed: int = 0, pad_token_id: int = 0,
                num_shards: int = 1, shard: int = 0, length_bucketing: bool = True):
    """A DataLoader of dynamically padded, length-bucketed batches over a tokenised
    ``datasets.Dataset`` (columns: input_ids, attention_mask, [token_type_ids], [labels]).
    ``num_shards``/``shard``: this process's share of a distributed run (see
    ``BucketBatchSampler``). ``length_bucketing=False``: plain shuffled batches (a pool of
    one batch sorts nothing across batches), each padded to its own longest."""
    if len(dataset) == 0:
        raise ValueError("The dataset is empty: there is nothing to train or evaluate on.")
    if "input_ids" not in dataset.column_names:
        raise ValueError(
            f"The dataset has columns {dataset.column_names} but no 'input_ids': tokenise it first."
        )
    columns = [c for c in (*MODEL_INPUTS, "labels") if c in dataset.column_names]
    rows = dataset.select_columns(columns)
    lengths = [len(ids) for ids in rows["input_ids"]]
    examples = rows.to_list()  # plain lists: no per-batch Arrow conversion in the hot loop
    sampler = BucketBatchSampler(lengths, batch_size, shuffle=shuffle, seed=seed, num_shards=num_shards, shard=shard,
                                 bucket_factor=50 if length_bucketing else 1)
    # Each iterator a DataLoader starts draws a seed from a generator: from torch's global one
    # unless given its own. An evaluation must not draw from it, or evaluating between epochs
    # would change the dropout masks of the epochs after it.
    own = None if shuffle else torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(
        examples, batch_sampler=sampler, collate_fn=partial(collate, pad_token_id=pad_token_id), generator=own
    )


# ----------------------------------------------------------------------------- optimiser


def layer_depth(name: str, num_layers: int) -> int:
    """0 for the embeddings, i+1 for transformer layer i, num_layers+1 for anything above."""
    if ".embeddings." in f".{name}":
        return 0
    match = re.search(r"\.layer\.(\d+)\.", f".{name}")
    if match and "encoder" in name:
        return int(match.group(1)) + 1
    return num_layers + 1


def parameter_groups(model: torch.nn.Module, config: TrainConfig) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (unless
    ``decay_exemptions`` is off); with
    ``layer_decay``, layer depth d gets lr * layer_decay ** (top - d); the head gets
    ``head_lr`` when given."""
    num_layers = _num_layers(model)
    groups: dict = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        depth = layer_depth(name, num_layers)
        is_head = depth == num_layers + 1 and not name.startswith("encoder.")
        no_decay = config.decay_exemptions and (parameter.ndim == 1 or "LayerNorm" in name or name.endswith(".bias"))
        lr = config.lr
        if config.layer_decay is not None:
            lr = config.lr * config.layer_decay ** (num_layers + 1 - depth)
        if is_head and config.head_lr is not None:
            lr = config.head_lr
        key = (lr, no_decay)
        group = groups.setdefault(key, {"params": [], "lr": lr, "weight_decay": 0.0 if no_decay else config.weight_decay})
        group["params"].append(parameter)
    if not groups:
        raise ValueError("The model has no trainable parameters: check the regime (set_regime).")
    return list(groups.values())


def _num_layers(model) -> int:
    config = getattr(getattr(model, "encoder", model), "config", None)
    return getattr(config, "num_hidden_layers", 0) or 0


# ----------------------------------------------------------------------------- loop


def train(model, train_data, config: TrainConfig | None = None, eval_data=None, metric=None,
          pad_token_id: int = 0, accelerator=None) -> History:
    """Train ``model`` (which returns ``{"loss", "logits"}`` given ``labels``) on a
    tokenised dataset. With ``eval_data`` and ``metric(logits_list, labels_list) -> dict``,
    evaluates after each epoch. Returns the ``History``.

    Under ``accelerate launch`` each process trains on its own shard of every epoch's
    batches (see ``BucketBatchSampler``) and gradients are averaged across processes, so
    the weights stay identical everywhere. ``History.losses`` are this process's own;
    ``examples_seen`` counts all processes."""
    from accelerate import Accelerator
    from transformers import get_constant_schedule, get_linear_schedule_with_warmup

    config = config or TrainConfig()
    torch.manual_seed(config.seed)  # dropout and data order follow the run's seed
    accelerator = accelerator or Accelerator()
    # Mixed precision as autocast around the forward pass, fp32 weights and optimiser state,
    # and a loss scaler for fp16. Not accelerate's mixed_precision: its state is one per
    # process, so a kernel that ran one precision could not then run another.
    precision = autocast_precision(config.precision, accelerator.device)
    scaler = torch.amp.GradScaler(accelerator.device.type) if precision == "fp16" else None
    # The loader is sharded here, not by accelerator.prepare: accelerate's sharding assumes
    # equal-sized batches and repeats examples to even out the last round.
    loader = make_loader(train_data, config.batch_size, shuffle=True, seed=config.seed, pad_token_id=pad_token_id,
                         num_shards=accelerator.num_processes, shard=accelerator.process_index,
                         length_bucketing=config.length_bucketing)
    optimizer = adamw(parameter_groups(model, config), config.lr, accelerator.device, fused=config.fused_adamw)
    steps = len(loader) * config.epochs  # this process's steps: the same on every process
    if config.schedule == "linear":
        scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * steps), steps)
    else:  # the text's loop: the same lr at every step
        scheduler = get_constant_schedule(optimizer)
    model, optimizer = accelerator.prepare(model, optimizer)
    history = History()
    # mininterval: at most one redraw a second (see similarity's progress bar: notebook redraws
    # are IOPub messages, and a flood of them can drop the cell's last message under nbval).
    bar = tqdm(total=steps, desc="training", mininterval=1.0,
               disable=not config.progress or not accelerator.is_local_main_process)
    for epoch in range(config.epochs):
        loader.batch_sampler.set_epoch(epoch)
        model.train()
        start = time.perf_counter()
        losses, seen = [], 0
        for step, batch in enumerate(loader):
            batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in batch.items()}
            with autocast(precision, accelerator.device):
                loss = model(**batch)["loss"]
            accelerator.backward(scaler.scale(loss) if scaler else loss)
            if scaler:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            if config.max_grad_norm is not None:
                accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            # Kept on the device: reading a loss (.item()) would make a GPU wait every step.
            losses.append(loss.detach())
            history.learning_rates.append(scheduler.get_last_lr()[0])
            seen += len(batch["input_ids"])
            bar.update()
            if step % 20 == 0 and bar.disable is False:
                bar.set_postfix(loss=f"{losses[-1].item():.3f}", refresh=False)  # drawn at the next redraw
        history.losses += torch.stack(losses).float().cpu().tolist()
        history.examples_seen += _sum_over_processes(seen, accelerator)
        history.epoch_seconds.append(time.perf_counter() - start)
        if eval_data is not None and metric is not None:
            logits, labels = predict(accelerator.unwrap_model(model), eval_data, config.eval_batch_size, pad_token_id,
                                     precision=config.precision)
            history.metrics.append(metric(logits, labels))
            bar.set_postfix(loss=f"{history.losses[-1]:.3f}", **{k: f"{v:.3f}" for k, v in history.metrics[-1].items()})
    bar.close()
    return history


def adamw(groups, lr: float, device, fused: bool = True) -> torch.optim.Optimizer:
    """AdamW, fused into one kernel per step where torch has one for the device: on a CPU
    the fused update is several times faster than the per-tensor loop (and it is what
    ``transformers.Trainer`` uses by default). ``fused=False``: torch's default loop."""
    if fused and torch.device(device).type in ("cpu", "cuda"):
        try:
            return torch.optim.AdamW(groups, lr=lr, fused=True)
        except (RuntimeError, ValueError):  # e.g. parameters of a dtype the fused kernel lacks
            pass
    return torch.optim.AdamW(groups, lr=lr)


def _sum_over_processes(count: int, accelerator) -> int:
    if accelerator.num_processes == 1:
        return count
    return int(accelerator.reduce(torch.tensor(count, device=accelerator.device), reduction="sum").item())


def in_dataset_order(fn, data, batch_size: int = 128, pad_token_id: int = 0) -> list:
    """``fn(batch)`` over length-bucketed batches of ``data`` (little padding), with its
    per-example results (rows of what it returns) put back in the dataset's order."""
    loader = make_loader(data, batch_size, shuffle=False, pad_token_id=pad_token_id)
    order = [i for batch in loader.batch_sampler for i in batch]
    rows = [row for batch in loader for row in fn(batch)]
    in_order = [None] * len(rows)
    for position, index in enumerate(order):
        in_order[index] = rows[position]
    return in_order


@torch.inference_mode()
def predict(model, data, batch_size: int = 128, pad_token_id: int = 0, precision: str = "fp32"):
    """Logits and labels for every example, in the dataset's order (batched by length),
    under autocast at ``precision`` (see ``TrainConfig.precision``)."""
    model.eval()
    device = next(model.parameters()).device

    def logits_and_labels(batch):
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast(precision, device):
            logits = model(**{k: v for k, v in batch.items() if k != "labels"})["logits"]
        logits = logits.float().cpu()
        labels = batch["labels"].cpu() if "labels" in batch else [None] * len(logits)
        return zip(logits, labels)

    pairs = in_dataset_order(logits_and_labels, data, batch_size, pad_token_id)
    return [logits for logits, _ in pairs], [labels for _, labels in pairs]


def accuracy(logits, labels) -> dict:
    """Classification accuracy from per-example logits and labels."""
    predictions = torch.stack(logits).argmax(-1)
    return {"accuracy": (predictions == torch.stack(labels)).float().mean().item()}


# ----------------------------------------------------------------------------- measuring


def one_at_a_time(make_model, train_data, eval_data, base: TrainConfig, changes: dict, pad_token_id: int = 0) -> dict:
    """``name -> (eval accuracy, seconds per epoch)`` of ``make_model()`` trained under ``base``
    and under ``base`` with each entry of ``changes`` (``name -> TrainConfig changes``) alone:
    what each change buys, everything else held fixed (lesson 1). ``base`` is listed first, as
    ``"base"``."""
    results = {}
    for name, change in {"base": {}, **changes}.items():
        model = make_model()
        history = train(model, train_data, replace(base, **change), pad_token_id=pad_token_id)
        results[name] = (accuracy(*predict(model, eval_data, pad_token_id=pad_token_id))["accuracy"],
                         history.seconds_per_epoch)
    return results


def adamw_step_seconds(model, config: TrainConfig, fused: bool, repeats: int = 5) -> float:
    """Seconds one AdamW step over ``model``'s trainable parameters takes (random gradients,
    after a first step that allocates the moments): fused or torch's per-tensor loop."""
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.grad = torch.randn_like(parameter)
    device = next(model.parameters()).device
    optimizer = adamw(parameter_groups(model, config), config.lr, device, fused=fused)
    optimizer.step()
    start = time.perf_counter()
    for _ in range(repeats):
        optimizer.step()
    seconds = (time.perf_counter() - start) / repeats
    optimizer.zero_grad(set_to_none=True)
    return seconds



def _return_freed_memory_to_os() -> None:
    """Hand memory that earlier work freed back to the OS. glibc's malloc keeps it for reuse,
    so without this a run that follows a bigger one grows the resident size by ~0 and its
    peak reads as nothing. A no-op where the C library has no ``malloc_trim``."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


@contextmanager
def peak_memory():
    """Measure the peak memory a block adds, in bytes: ``with peak_memory() as peak: ...``
    then ``peak["bytes"]``. On a GPU, torch's own counter; on the CPU, the process's
    resident memory sampled every 5 ms (a lower bound of the true peak)."""
    result = {"bytes": 0, "device": "cpu"}
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result["device"] = "cuda"
        try:
            yield result
        finally:
            torch.cuda.synchronize()
            result["bytes"] = torch.cuda.max_memory_allocated() - base
        return
    import psutil

    _return_freed_memory_to_os()
    process = psutil.Process()
    base = process.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.005):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield result
    finally:
        stop.set()
        sampler.join()
        result["bytes"] = max(peak[0], process.memory_info().rss) - base
