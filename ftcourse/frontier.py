"""The parameter-efficient frontier: every family the course names, trained on one encoder, one task and one budget.

Each method is the same composition, ``head(method(encoder))``, trained by the same loop
(``training.train``: AdamW, warmup and linear decay, clipping) on the same sentences for the
same number of epochs. Only the learning rate differs, and it is chosen per method on a
validation part carved from the training split (``data.carve_validation``), never on the
dev set the frontier reports. What a method changes is which parameters train:

- ``frozen``: none of the encoder's (the head alone);
- ``BitFit`` (Ben Zaken et al., 2022): the encoder's biases;
- ``prompt tuning`` (Lester et al., 2021): a few input vectors before the sentence;
- ``(IA)³`` (Liu et al., 2022): one scaling vector per targeted projection;
- ``LoRA`` (Hu et al., 2021) and ``DoRA`` (Liu et al., 2024): low-rank updates ``B·A``;
- ``full fine-tuning``: every weight.

Houlsby adapters are counted in ``costs`` but not trained here: the library that builds
them for BERT (AdapterHub's ``adapters``) pins an older transformers (see ``costs.HOULSBY_NOTE``).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Callable

import datasets
import torch
from torch import nn
from tqdm.auto import tqdm
from transformers.modeling_outputs import BaseModelOutput

from . import config, costs, data, heads, lora, training
from .regimes import accuracy_on
from .report import Table

# The same settings as lesson 3's bert-base accounting of these methods counts.
NUM_VIRTUAL_TOKENS = costs.DEFAULT_NUM_VIRTUAL_TOKENS
EVERY_PROJECTION = costs.ALL_PROJECTIONS


# ----------------------------------------------------------------------------- the methods


_train_only = costs.train_only  # requires_grad on exactly the parameters whose name it accepts


def _lora(rank: int, targets=("query", "value"), use_dora: bool = False):
    def build(encoder):
        import dataclasses

        from peft import inject_adapter_in_model

        settings = dataclasses.replace(lora.lora_config(rank, targets), use_dora=use_dora)  # alpha = r, dropout 0.1
        return _train_only(inject_adapter_in_model(settings, encoder), lambda name: "lora_" in name)
    return build


def _ia3(encoder):
    from peft import IA3Config, inject_adapter_in_model

    # peft's own targets for BERT (its suffix "output.dense" takes the attention's output too).
    settings = IA3Config(target_modules=["key", "value", "output.dense"], feedforward_modules=["output.dense"])
    return _train_only(inject_adapter_in_model(settings, encoder), lambda name: "ia3_" in name)


class PromptTunedEncoder(nn.Module):
    """``peft``'s prompt tuning on a bare encoder: ``num_virtual_tokens`` learned vectors go
    before the sentence's embeddings, and everything else stays frozen. The states of the
    virtual positions are dropped from the output, so a head reads the sentence's own
    positions ([CLS] still first) exactly as it does for every other method."""

    def __init__(self, encoder: nn.Module, num_virtual_tokens: int = NUM_VIRTUAL_TOKENS):
        super().__init__()
        from peft import PromptTuningConfig, TaskType, get_peft_model

        self.config = encoder.config
        self.num_virtual_tokens = num_virtual_tokens
        self.peft = get_peft_model(encoder, PromptTuningConfig(task_type=TaskType.FEATURE_EXTRACTION,
                                                               num_virtual_tokens=num_virtual_tokens))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **_):
        states = self.peft(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return BaseModelOutput(last_hidden_state=states[:, self.num_virtual_tokens:])


@dataclass(frozen=True)
class Method:
    """One point of the frontier: how it changes the encoder, and the learning rates its
    validation sweep tries (method-typical ranges: a few parameters want big steps)."""

    name: str
    setting: str
    lrs: tuple
    build: Callable[[nn.Module], nn.Module]  # a copy of the encoder -> it with only the method's parameters trainable


# The grids: typical ranges, recentred once on a first sweep's validation accuracy (600 SST-2
# sentences, 1 epoch, seed 0; never dev), e.g. the head alone 1e-3 0.600 vs 1e-2 0.770, LoRA r=8
# 1e-3 0.607 vs 4e-3 0.783, full fine-tuning 3e-5 0.680 vs 1e-4 0.780: few steps want big ones.
METHODS = (
    Method("frozen + linear head", "the head alone", (1e-2, 4e-2), lambda e: _train_only(e, lambda n: False)),
    Method("BitFit", "every bias", (1e-3, 4e-3), lambda e: _train_only(e, lambda n: n.endswith("bias"))),
    Method("prompt tuning", f"{NUM_VIRTUAL_TOKENS} virtual tokens", (3e-1, 1.2), PromptTunedEncoder),
    Method("(IA)³", "key, value, output projections", (1e-2, 4e-2), _ia3),
    Method("LoRA r=1", "query, value", (2e-3, 8e-3), _lora(1)),
    Method("LoRA r=8", "query, value", (2e-3, 8e-3), _lora(8)),
    Method("LoRA r=32", "query, value", (2e-3, 8e-3), _lora(32)),
    Method("LoRA r=8, every projection", "attention and MLP", (2e-3, 8e-3), _lora(8, EVERY_PROJECTION)),
    Method("DoRA r=8", "query, value", (2e-3, 8e-3), _lora(8, use_dora=True)),
    Method("full fine-tuning", "every weight", (1e-4, 4e-4), lambda e: _train_only(e, lambda n: True)),
)
METHOD_NAMES = tuple(m.name for m in METHODS)
FROZEN = METHODS[0].name  # the head alone: its chosen lr is every method's head lr


def method(name: str) -> Method:
    for m in METHODS:
        if m.name == name:
            return m
    raise ValueError(f"Unknown method {name!r}. Known methods: {', '.join(METHOD_NAMES)}.")


def build_model(m: Method, encoder: nn.Module, num_labels: int, pooling: str = "cls", seed: int = 0) -> heads.TaskModel:
    """``head(m(copy of encoder))``; ``encoder`` itself is never modified. The head is always trained."""
    torch.manual_seed(seed)  # the head's initialisation (and prompt tuning's vectors) follow the seed
    backbone = m.build(copy.deepcopy(encoder))
    return heads.TaskModel(backbone, heads.SentenceClassifier(encoder.config.hidden_size, num_labels, pooling=pooling))


def trainable_split(model: heads.TaskModel) -> dict:
    """The method's own trainable parameters and the head's, apart."""
    method_count = sum(p.numel() for p in model.encoder.parameters() if p.requires_grad)
    head_count = sum(p.numel() for p in model.head.parameters() if p.requires_grad)
    return {"method": method_count, "head": head_count}


def methods_table(encoder: nn.Module, num_labels: int = 2) -> Table:
    """Each method on ``encoder``: what it trains (its own parameters and the head's, counted
    on the built model), their share of the encoder, and the learning rates its sweep tries."""
    total = sum(p.numel() for p in encoder.parameters())
    rows = []
    for m in METHODS:
        split = trainable_split(build_model(m, encoder, num_labels))
        rows.append([m.name, m.setting, split["method"], split["head"], 100 * split["method"] / total,
                     ", ".join(f"{lr:g}" for lr in m.lrs)])
    return Table(["method", "setting", "method params", "head", "share %", "lrs tried"], rows,
                 formats={"share %": "{:.3f}"},
                 notes=[f"share: the method's own parameters over the encoder's {total:,}"])


# ----------------------------------------------------------------------------- runs


@dataclass
class FrontierRun:
    method: str
    lr: float
    seed: int
    validation: float  # accuracy on the validation part carved from the training split
    dev: float | None  # accuracy on the reported split, for the run the sweep chose (and the other seeds)
    method_parameters: int
    head_parameters: int
    bytes_per_task: int  # what a task stores beside the shared backbone (a whole model for full fine-tuning)
    seconds_per_epoch: float
    peak_memory_bytes: int
    steps: int

    def as_dict(self) -> dict:
        return asdict(self)


def run_method(m: Method, encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, lr: float,
               profile=None, seed: int = 0, num_labels: int = 2, dev: datasets.Dataset | None = None,
               head_lr: float | None = None):
    """Train ``m`` at ``lr`` on ``train`` for the profile's ``frontier_epochs`` (the head at
    ``head_lr``, default the profile's); score it on ``validation`` (and on ``dev`` when given).
    Returns the run and the trained model."""
    profile = config.get_profile(profile)
    model = build_model(m, encoder, num_labels, profile.frozen_pooling, seed)
    head_only = m.name == FROZEN
    settings = training.TrainConfig(lr=lr, head_lr=None if head_only else (head_lr or profile.head_lr),
                                    epochs=profile.frontier_epochs, batch_size=profile.regime_batch_size,
                                    seed=seed, progress=False)
    with training.peak_memory() as peak:
        history = training.train(model, train, settings)
    split = trainable_split(model)
    stored = heads.count_parameters(model)["total"] if m.name == "full fine-tuning" else sum(split.values())
    run = FrontierRun(m.name, lr, seed, accuracy_on(model, validation), accuracy_on(model, dev) if dev is not None else None,
                      split["method"], split["head"], 4 * stored, history.seconds_per_epoch, peak["bytes"],
                      len(history.losses))
    return run, model


def sweep(m: Method, encoder, train, validation, profile, seed: int, num_labels: int, head_lr=None,
          extensions: int = 1, step: float = 4.0) -> list:
    """``m`` at each lr of its grid, scored on ``validation``. When the best is at an end of
    the grid, the grid grows one ``step`` further that way (at most ``extensions`` times), so
    a chosen lr is never one the grid merely cut off. Returns ``(run, model)`` pairs, in the
    order tried."""
    data.require_validation(validation, "frontier.sweep")
    tried = [run_method(m, encoder, train, validation, lr, profile, seed, num_labels, head_lr=head_lr)
             for lr in tqdm(m.lrs, desc=f"{m.name}: lr sweep", leave=False)]
    for _ in range(extensions):
        lrs = sorted(run.lr for run, _ in tried)
        best = max(tried, key=lambda pair: pair[0].validation)[0].lr
        if best not in (lrs[0], lrs[-1]) or len(lrs) < 2:
            break
        further = lrs[-1] * step if best == lrs[-1] else lrs[0] / step
        tried.append(run_method(m, encoder, train, validation, further, profile, seed, num_labels, head_lr=head_lr))
    return tried


def frontier(encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, dev: datasets.Dataset,
             profile=None, methods=METHODS, seeds=(0, 1, 2), num_labels: int = 2) -> list[FrontierRun]:
    """Every method: its lr swept on ``validation`` with the first seed (``sweep``), then the
    chosen lr trained with the other seeds. The sweep's run at the chosen lr is the first
    seed's result (reused, not retrained). Only the chosen runs are scored on ``dev``.

    The frozen head goes first: the head lr its sweep chooses is every other method's head
    lr, so the same head, trained the same way, sits on every method."""
    profile = config.get_profile(profile)
    methods = sorted(methods, key=lambda m: m.name != FROZEN)
    runs, head_lr = [], None
    for m in tqdm(methods, desc="frontier"):
        tried = sweep(m, encoder, train, validation, profile, seeds[0], num_labels, head_lr)
        best, model = max(tried, key=lambda pair: pair[0].validation)  # ties: the first tried
        best.dev = accuracy_on(model, dev)
        if m.name == FROZEN:
            head_lr = best.lr
        runs += [run for run, _ in tried]
        del tried, model
        for seed in seeds[1:]:
            runs.append(run_method(m, encoder, train, validation, best.lr, profile, seed, num_labels, dev, head_lr)[0])
    return runs


# ----------------------------------------------------------------------------- reading it


def chosen(runs) -> dict:
    """method -> the runs at the lr its sweep chose (one per seed), scored on dev."""
    picked = {}
    for run in runs:
        if run.dev is not None:
            picked.setdefault(run.method, []).append(run)
    return picked


def summarize(runs) -> dict:
    """method -> lr, dev mean and std over seeds, parameters, bytes per task, s/epoch, peak memory."""
    summary = {}
    for name, group in chosen(runs).items():
        dev = torch.tensor([r.dev for r in group])
        first = group[0]
        summary[name] = {
            "lr": first.lr, "mean": dev.mean().item(), "std": dev.std().item() if len(group) > 1 else 0.0,
            "n": len(group), "method_parameters": first.method_parameters, "head_parameters": first.head_parameters,
            "bytes_per_task": first.bytes_per_task,
            "seconds_per_epoch": sum(r.seconds_per_epoch for r in group) / len(group),
            "peak_memory_bytes": max(r.peak_memory_bytes for r in group), "steps": first.steps,
        }
    return summary


def sweep_table(runs) -> Table:
    """Every sweep run: the lr tried and its validation accuracy; the chosen one is marked."""
    picked = {name: group[0].lr for name, group in chosen(runs).items()}
    first_seed = min(r.seed for r in runs)
    order = list(dict.fromkeys(r.method for r in runs))
    swept = sorted((r for r in runs if r.seed == first_seed), key=lambda r: (order.index(r.method), r.lr))
    rows = []
    for r in swept:
        lrs = [x.lr for x in swept if x.method == r.method]
        mark = "chosen" if picked.get(r.method) == r.lr else ""
        if mark and r.lr in (lrs[0], lrs[-1]) and len(lrs) > 2:
            mark += " (at the grid's end after one extension)"
        rows.append([r.method, r.lr, r.validation, mark])
    return Table(["method", "lr", "validation accuracy", ""], rows,
                 formats={"lr": "{:g}", "validation accuracy": "{:.3f}"},
                 notes=["each method's grid grows one step (x4) past the end its best lr was at, once"])


def frontier_table(summary: dict, encoder_parameters: int) -> Table:
    """The closing note's table: method, trainable, share, MiB per task, validation lr, dev
    mean ± std, s/epoch, peak MiB."""
    rows = []
    for name, s in summary.items():
        trainable = s["method_parameters"] + s["head_parameters"]
        rows.append([name, trainable, 100 * s["method_parameters"] / encoder_parameters, s["bytes_per_task"] / 2**20,
                     s["lr"], f"{s['mean']:.3f} ± {s['std']:.3f}", s["seconds_per_epoch"], s["peak_memory_bytes"] / 2**20])
    return Table(["method", "trainable", "share %", "MiB per task", "validation lr", f"dev (n={s['n']})",
                  "s/epoch", "peak MiB"], rows,
                 formats={"share %": "{:.3f}", "MiB per task": "{:,.3f}", "validation lr": "{:g}",
                          "s/epoch": "{:.1f}", "peak MiB": "{:,.0f}"},
                 notes=["share: the method's own parameters (head excluded) over the encoder's; the head is "
                        "trained in every row", "dev: mean ± std over seeds at the lr chosen on validation"])


def pareto_front(summary: dict) -> list[str]:
    """The methods no other method beats on both axes: at least as accurate (mean dev) with
    fewer trainable parameters, or more accurate with no more. Ordered by parameters."""
    def trainable(name):
        return summary[name]["method_parameters"] + summary[name]["head_parameters"]

    front = [a for a in summary if not any(
        (trainable(b) <= trainable(a) and summary[b]["mean"] > summary[a]["mean"]) or
        (trainable(b) < trainable(a) and summary[b]["mean"] >= summary[a]["mean"]) for b in summary if b != a)]
    return sorted(front, key=trainable)


def plot_frontier(summary: dict, ax=None):
    """Dev accuracy against trainable parameters (log axis), one point per method with its
    spread over seeds; marker area grows with seconds per epoch. Full fine-tuning and the
    frozen head are the reference lines; the Pareto front is drawn and named."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.8))
    slowest = max(s["seconds_per_epoch"] for s in summary.values()) or 1.0
    for name, s in summary.items():
        x = s["method_parameters"] + s["head_parameters"]
        ax.errorbar(x, s["mean"], yerr=s["std"], fmt="none", ecolor="0.5", capsize=3)
        ax.scatter(x, s["mean"], s=30 + 220 * s["seconds_per_epoch"] / slowest, alpha=0.8, label=name)
    for name, style in (("full fine-tuning", "--"), ("frozen + linear head", ":")):
        if name in summary:
            ax.axhline(summary[name]["mean"], color="0.4", linestyle=style, linewidth=1, label=f"{name}: its mean")
    front = pareto_front(summary)
    xs = [summary[n]["method_parameters"] + summary[n]["head_parameters"] for n in front]
    ax.plot(xs, [summary[n]["mean"] for n in front], color="black", linewidth=1, label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters (log scale; marker area: seconds per epoch)")
    ax.set_ylabel("dev accuracy")
    ax.set_title("The parameter-efficient frontier: one encoder, one task, one budget")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, alpha=0.3)
    return ax


def verdicts(summary: dict, keep: float = 0.97) -> list[str]:
    """The seed's claims, computed: which methods keep ``keep`` of full fine-tuning's accuracy
    and at what share of its parameters; whether any saves training time, or only memory and
    storage; where prompt tuning falls."""
    full = summary["full fine-tuning"]
    full_trainable = full["method_parameters"] + full["head_parameters"]
    lines = []
    kept = [(n, s) for n, s in summary.items() if n != "full fine-tuning" and s["mean"] >= keep * full["mean"]]
    if kept:
        listed = ", ".join(f"{n} ({100 * (s['method_parameters'] + s['head_parameters']) / full_trainable:.2f}% "
                           f"of its parameters)" for n, s in sorted(kept, key=lambda x: x[1]["method_parameters"]))
        lines.append(f"keep >= {keep:.0%} of full fine-tuning's dev accuracy ({full['mean']:.3f}): {listed}")
    else:
        lines.append(f"no method keeps {keep:.0%} of full fine-tuning's dev accuracy ({full['mean']:.3f}) here")
    peft_names = [n for n in summary if n not in ("full fine-tuning", FROZEN)]
    time_ratio = {n: summary[n]["seconds_per_epoch"] / full["seconds_per_epoch"] for n in peft_names}
    memory_ratio = {n: summary[n]["peak_memory_bytes"] / max(full["peak_memory_bytes"], 1) for n in peft_names}
    fastest, slowest = min(time_ratio, key=time_ratio.get), max(time_ratio, key=time_ratio.get)
    saving = [n for n in peft_names if time_ratio[n] < 0.9]
    lines.append(f"time: {len(saving)} of {len(peft_names)} PEFT methods train an epoch in under 0.9x full "
                 f"fine-tuning's time ({time_ratio[fastest]:.2f}x {fastest} to {time_ratio[slowest]:.2f}x {slowest}); "
                 f"what they save is the weight gradients and the optimiser's update of the frozen weights: the "
                 f"forward pass and the backward pass through the layers below the trained ones still run")
    lines.append(f"memory: their peak is {min(memory_ratio.values()):.2f}x to {max(memory_ratio.values()):.2f}x "
                 f"full fine-tuning's; storage per task: "
                 f"{min(summary[n]['bytes_per_task'] for n in peft_names) / 2**20:.2f} to "
                 f"{max(summary[n]['bytes_per_task'] for n in peft_names) / 2**20:.2f} MiB against "
                 f"{full['bytes_per_task'] / 2**20:.1f}")
    if "prompt tuning" in summary:
        prompt = summary["prompt tuning"]
        below = sum(s["mean"] > prompt["mean"] for n, s in summary.items() if n != "prompt tuning")
        gap = 100 * (full["mean"] - prompt["mean"])
        spread = 100 * (full["std"] + prompt["std"])
        agrees = gap > spread  # a gap wider than the two seed spreads together, not noise
        lines.append(f"prompt tuning: {prompt['mean']:.3f}, {gap:.1f} points under full fine-tuning (the two "
                     f"spreads together: {spread:.1f}), {below} of {len(summary) - 1} methods above it; Lester et "
                     f"al. (2021) found the gap closes only at billions of parameters, so at this size it should "
                     f"stay open: {'agrees' if agrees else 'DISAGREES'}")
    return lines

