"""What each choice buys, one at a time: freezing the lower layers, the stability tactics, pretraining itself.

Lesson 3 compares the two extremes (a frozen encoder, every weight moving) and LoRA. The course
text names the ground between them and the choices that steady a run; each is measured here on
its own, with everything else held fixed:

- **partial freezing**: the embeddings and the lower ``k`` layers stay frozen, the layers above
  and the head train (``freeze_lower``). The backward pass stops at layer ``k``, so an epoch
  gets cheaper as ``k`` grows, and a task stores only its upper layers and head. LoRA sits beside
  them: every pretrained weight frozen, small updates trained, the backward pass through all layers;
- **the tactics one at a time**: warmup, layer-wise learning-rate decay, and freezing the lower
  layers, alone and together, at a learning rate high enough for them to matter;
- **what pretraining buys**: the same architecture from a random initialisation, trained the
  same way for the same number of steps, at a small and a larger labelled set.

Every run is ``training.train`` (AdamW, linear decay, clipping) on the same sentences, scored
on the reported dev split; nothing here is chosen on it.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace

import datasets
import torch
from torch import nn
from tqdm.auto import tqdm

from . import config, data, heads, training
from .regimes import accuracy_on
from .report import Table

#: The tactics run at this multiple of the profile's fine-tuning lr: at the recipe's own lr a
#: short run is steady without help, and there is nothing for a tactic to fix (the exercise
#: runs its tactics at the same multiple).
TACTIC_LR_SCALE = 5.0
#: Layer-wise decay's factor: each layer down trains at 0.8x the lr of the one above
#: (Clark et al., 2020, use 0.8 for base-size models).
LAYER_DECAY = 0.8
WARMUP_RATIO = 0.1  # the recipe's: 10% of the steps
#: The smallest labelled set of the pretraining comparison: a few dozen sentences, where the
#: text's claim ("the labelled set can be small") is made.
SMALL_SIZE = 64


# ----------------------------------------------------------------------------- freezing


def encoder_depth(encoder: nn.Module) -> int:
    """The number of Transformer layers of a BERT-style encoder."""
    depth = getattr(getattr(encoder, "config", None), "num_hidden_layers", None)
    if not depth:
        raise ValueError(f"{type(encoder).__name__} has no config.num_hidden_layers: pass a BERT-style encoder.")
    return depth


def freeze_lower(encoder: nn.Module, k: int) -> nn.Module:
    """Freeze ``encoder``'s embeddings and its lower ``k`` Transformer layers (in place; returns
    it). ``k = 0`` freezes the embeddings only; ``k`` = the depth freezes everything."""
    depth = encoder_depth(encoder)
    if not 0 <= k <= depth:
        raise ValueError(f"k={k} is outside this encoder's 0..{depth} layers. Fix: pass k from 0 (the embeddings "
                         f"only) to {depth} (every layer).")
    for name, parameter in encoder.named_parameters():
        layer = training.layer_depth(name, depth)  # 0: embeddings, i + 1: layer i, depth + 1: above
        parameter.requires_grad = layer > k
    return encoder


def freezing_depths(encoder: nn.Module) -> tuple:
    """The ``k`` values a study of partial freezing reads: none, a third, two thirds and all of
    the layers (0, 2, 4, 6 on a 6-layer encoder; 0, 4, 8, 12 on bert-base)."""
    depth = encoder_depth(encoder)
    return tuple(sorted({0, depth // 3, 2 * depth // 3, depth}))


def reinitialized(encoder: nn.Module, seed: int = 0) -> nn.Module:
    """A new encoder of ``encoder``'s architecture and config, its weights drawn by the
    architecture's own initialisation (seeded): the same model, minus everything pretraining
    put in it."""
    torch.manual_seed(seed)
    if getattr(encoder, "pooler", "no pooler option") is None:  # a BertModel built without its pooler
        return type(encoder)(encoder.config, add_pooling_layer=False)
    return type(encoder)(encoder.config)


# ----------------------------------------------------------------------------- one run


@dataclass
class AblationRun:
    study: str  # "partial freezing", "tactics" or "pretraining"
    setting: str  # e.g. "k=2", "warmup only", "random init"
    seed: int
    train_size: int
    accuracy: float  # on the split it was scored on: the reported dev split, or validation in a sweep
    trainable: int
    bytes_per_task: int  # what a task stores beside a shared frozen backbone (the whole model when nothing is frozen)
    seconds_per_epoch: float
    steps: int
    lr: float
    k: int | None = None  # layers frozen (partial freezing and the freezing tactic)
    scored_on: str = "dev"

    def as_dict(self) -> dict:
        return asdict(self)


def train_and_score(study: str, setting: str, encoder: nn.Module, train: datasets.Dataset, dev: datasets.Dataset,
                    settings: training.TrainConfig, pooling: str = "cls", num_labels: int | None = None,
                    k: int | None = None, scored_on: str = "dev") -> AblationRun:
    """``head(encoder)`` trained with ``settings`` on ``train`` (``encoder`` is trained as it is,
    so pass a copy), then scored on ``dev`` (named ``scored_on``)."""
    from .regimes import num_labels_of

    num_labels = num_labels or num_labels_of(train, dev)
    torch.manual_seed(settings.seed)  # the head's initialisation follows the seed
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, num_labels, pooling=pooling))
    history = training.train(model, train, settings)
    counts = heads.count_parameters(model)
    stored = counts["total"] if counts["frozen"] == 0 else counts["trainable"]
    return AblationRun(study, setting, settings.seed, len(train), accuracy_on(model, dev), counts["trainable"],
                       4 * stored, history.seconds_per_epoch, len(history.losses), settings.lr, k, scored_on)


def _recipe(profile, seed: int, head_lr: float | None = None, **changes) -> training.TrainConfig:
    base = dict(lr=profile.finetune_lr, head_lr=head_lr or profile.head_lr, epochs=profile.frontier_epochs,
                batch_size=profile.regime_batch_size, seed=seed, progress=False, warmup_ratio=WARMUP_RATIO)
    return training.TrainConfig(**{**base, **changes})


# ----------------------------------------------------------------------------- the studies


def partial_freezing(encoder: nn.Module, train, dev, profile=None, ks=None, seeds=(0,),
                     head_lr: float | None = None, lora_rank: int | None = None,
                     lora_lr: float | None = None) -> list[AblationRun]:
    """Full fine-tuning, then the embeddings and the lower ``k`` layers frozen for each ``k``
    (default ``freezing_depths``), the rest trained with the head (at ``head_lr``, default the
    profile's) by the recipe at the profile's fine-tuning lr, then LoRA at ``lora_rank``
    (default the profile's; 0 leaves it out) at ``lora_lr`` (default the profile's), for every seed."""
    from . import lora

    profile = config.get_profile(profile)
    ks = freezing_depths(encoder) if ks is None else ks
    rank = profile.lora_rank if lora_rank is None else lora_rank
    runs = []
    # One bar over every run (its estimate of the time left is tqdm's), seed by seed as before.
    settings = [(seed, k) for seed in seeds for k in (None, *ks, *(["lora"] if rank else []))]
    for seed, k in tqdm(settings, desc="partial freezing"):
        if k is None:
            runs.append(train_and_score("partial freezing", "nothing frozen", copy.deepcopy(encoder), train, dev,
                                        _recipe(profile, seed, head_lr), profile.frozen_pooling))
        elif k == "lora":
            runs.append(train_and_score("partial freezing", f"LoRA r={rank}", lora.add_lora(copy.deepcopy(encoder), rank),
                                        train, dev, _recipe(profile, seed, head_lr, lr=lora_lr or profile.lora_lr),
                                        profile.frozen_pooling))
        else:
            runs.append(train_and_score("partial freezing", f"k={k}", freeze_lower(copy.deepcopy(encoder), k), train,
                                        dev, _recipe(profile, seed, head_lr), profile.frozen_pooling, k=k))
    return runs


def tactic_settings(encoder: nn.Module) -> dict:
    """Each tactic alone, both schedule tactics, and none, as ``(TrainConfig changes, k)``:
    linear decay and clipping run in every one; what differs is warmup, layer-wise lr decay
    and the lower half of the layers frozen."""
    half = encoder_depth(encoder) // 2
    return {
        "neither": (dict(warmup_ratio=0.0), None),
        "warmup only": (dict(warmup_ratio=WARMUP_RATIO), None),
        "layer decay only": (dict(warmup_ratio=0.0, layer_decay=LAYER_DECAY), None),
        "warmup + layer decay": (dict(warmup_ratio=WARMUP_RATIO, layer_decay=LAYER_DECAY), None),
        f"lower {half} layers frozen": (dict(warmup_ratio=0.0), half),
    }


def tactics(encoder: nn.Module, train, dev, profile=None, seeds=(0, 1, 2), head_lr: float | None = None) -> list[AblationRun]:
    """Every ``tactic_settings`` entry for every seed, at ``TACTIC_LR_SCALE`` x the profile's
    fine-tuning lr."""
    profile = config.get_profile(profile)
    lr = TACTIC_LR_SCALE * profile.finetune_lr
    runs = []
    settings = [(name, setting, seed) for name, setting in tactic_settings(encoder).items() for seed in seeds]
    for name, (changes, k), seed in tqdm(settings, desc="tactics"):
        body = copy.deepcopy(encoder) if k is None else freeze_lower(copy.deepcopy(encoder), k)
        runs.append(train_and_score("tactics", name, body, train, dev, _recipe(profile, seed, head_lr, lr=lr, **changes),
                                    profile.frozen_pooling, k=k))
    return runs


def pretraining(encoder: nn.Module, pool, dev, profile=None, sizes=None, seeds=(0,), steps: int | None = None,
                lrs: dict | None = None, head_lr: float | None = None, reuse=()) -> list[AblationRun]:
    """Full fine-tuning from the pretrained weights and from ``reinitialized`` ones, at each
    labelled-set size (default ``SMALL_SIZE`` and the whole ``pool``), for ``steps`` optimiser
    steps each (default: one epoch over the pool): a small set repeats, so every run takes the
    same steps. ``lrs``: the lr of each start, ``{"pretrained": ..., "random init": ...}``
    (default the profile's fine-tuning lr for both). ``reuse``: runs already made with the
    same recipe (e.g. partial freezing's "nothing frozen" over the whole pool), kept as the
    pretrained rows of their size and seed instead of training them again."""
    profile = config.get_profile(profile)
    sizes = sorted({min(SMALL_SIZE, len(pool)), len(pool)}) if sizes is None else sorted(sizes)
    steps = steps or math.ceil(len(pool) / profile.regime_batch_size)
    lrs = {"pretrained": profile.finetune_lr, "random init": profile.finetune_lr, **(lrs or {})}
    made = {(r.train_size, r.seed, r.lr, r.steps): r for r in reuse if r.setting == "nothing frozen"}
    runs = []
    for size, seed in tqdm([(size, seed) for size in sizes for seed in seeds], desc="pretraining"):
        subset = data.subsample(pool, size, seed=seed)
        batches = math.ceil(size / profile.regime_batch_size)
        epochs = math.ceil(steps / batches)
        kept = made.get((size, seed, lrs["pretrained"], epochs * batches))
        if kept is not None:
            runs.append(replace(kept, study="pretraining", setting="pretrained"))
        else:
            runs.append(train_and_score("pretraining", "pretrained", copy.deepcopy(encoder), subset, dev,
                                        _recipe(profile, seed, head_lr, lr=lrs["pretrained"], epochs=epochs),
                                        profile.frozen_pooling))
        runs.append(train_and_score("pretraining", "random init", reinitialized(encoder, seed), subset, dev,
                                    _recipe(profile, seed, head_lr, lr=lrs["random init"], epochs=epochs),
                                    profile.frozen_pooling))
    return runs


def choose_lr(make_encoder, train, validation, lrs, profile=None, head_lr: float | None = None, seed: int = 0):
    """The lr of ``lrs`` whose run (``make_encoder()`` fine-tuned by the recipe) scores best on
    ``validation``, a part carved from the training split. Returns ``(lr, runs)``; ties go to
    the first tried."""
    data.require_validation(validation, "ablations.choose_lr")
    profile = config.get_profile(profile)
    runs = [train_and_score("lr sweep", f"lr {lr:g}", make_encoder(), train, validation,
                            _recipe(profile, seed, head_lr, lr=lr), profile.frozen_pooling, scored_on="validation")
            for lr in tqdm(lrs, desc="lr sweep")]
    best = max(runs, key=lambda r: r.accuracy)
    return best.lr, runs


def is_lora(setting: str) -> bool:
    """Whether a partial-freezing study's setting is its LoRA row (``partial_freezing``'s ``lora_rank``),
    which the table, the plot and the verdicts set apart from the k rows."""
    return setting.startswith("LoRA")


# ----------------------------------------------------------------------------- reading them


def summarize(runs) -> dict:
    """(setting, train size) -> dev mean and std over seeds, with the run's costs."""
    groups: dict = {}
    for run in runs:
        groups.setdefault((run.setting, run.train_size), []).append(run)
    summary = {}
    for key, group in groups.items():
        accuracy = torch.tensor([r.accuracy for r in group])
        first = group[0]
        summary[key] = {"mean": accuracy.mean().item(), "std": accuracy.std().item() if len(group) > 1 else 0.0, "n": len(group),
                        "trainable": first.trainable, "bytes_per_task": first.bytes_per_task, "k": first.k,
                        "seconds_per_epoch": sum(r.seconds_per_epoch for r in group) / len(group),
                        "steps": first.steps, "lr": first.lr}
    return summary


def _dev(s: dict) -> str:
    return f"{s['mean']:.3f} ± {s['std']:.3f}" if s["n"] > 1 else f"{s['mean']:.3f}"


def partial_freezing_table(runs, encoder_parameters: int) -> Table:
    summary = summarize(runs)
    full = summary[("nothing frozen", runs[0].train_size)]
    rows = [[setting, s["trainable"], 100 * s["trainable"] / encoder_parameters, s["bytes_per_task"] / 2**20,
             s["seconds_per_epoch"], s["seconds_per_epoch"] / full["seconds_per_epoch"], _dev(s)]
            for (setting, _), s in summary.items()]
    n = full["n"]
    return Table(["lower layers frozen", "trainable", "share %", "MiB per task", "s/epoch", "x full", f"dev (n={n})"],
                 rows, formats={"share %": "{:.1f}", "MiB per task": "{:,.2f}", "s/epoch": "{:.1f}", "x full": "{:.2f}"},
                 notes=["k: the embeddings and the lower k Transformer layers frozen (k=0: the embeddings only); "
                        "LoRA: every pretrained weight frozen, rank-r updates on query and value trained",
                        "MiB per task: the trained layers and head, beside a shared frozen backbone; "
                        "nothing frozen stores the whole model",
                        f"{full['steps']} optimiser steps each, lr {full['lr']:g}"
                        + "".join(f" (LoRA: lr {s['lr']:g})" for (name, _), s in summary.items() if is_lora(name))])


def tactics_table(runs) -> Table:
    summary = summarize(runs)
    first = next(iter(summary.values()))
    rows = [[setting, _dev(s), ", ".join(f"{r.accuracy:.3f}" for r in sorted(runs, key=lambda r: r.seed) if r.setting == setting)]
            for (setting, _), s in summary.items()]
    return Table(["tactic", f"dev (n={first['n']})", "each seed"], rows,
                 notes=[f"every run: lr {first['lr']:g} ({TACTIC_LR_SCALE:g}x the profile's fine-tuning lr), "
                        f"{first['steps']} steps, linear decay and clipping; warmup {WARMUP_RATIO:.0%} of the steps; "
                        f"layer decay {LAYER_DECAY}"])


def pretraining_table(runs) -> Table:
    summary = summarize(runs)
    rows = []
    for size in sorted({size for _, size in summary}):
        pre, rand = summary[("pretrained", size)], summary[("random init", size)]
        rows.append([size, _dev(pre), _dev(rand), 100 * (pre["mean"] - rand["mean"]), pre["steps"]])
    return Table(["labelled sentences", "pretrained", "random init", "gap (points)", "steps"], rows,
                 formats={"gap (points)": "{:+.1f}"},
                 notes=["the same architecture, recipe and number of optimiser steps; a small set repeats"])


def plot_partial_freezing(runs, ax=None):
    """Dev accuracy (mean and spread) and seconds per epoch against ``k``, on two axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    summary = summarize(runs)
    points = sorted((s["k"], s) for (setting, _), s in summary.items() if s["k"] is not None)
    ks = [k for k, _ in points]
    ax.errorbar(ks, [s["mean"] for _, s in points], yerr=[s["std"] for _, s in points], marker="o", capsize=3,
                label="dev accuracy")
    full = summary[("nothing frozen", runs[0].train_size)]
    ax.axhline(full["mean"], color="0.4", linestyle="--", linewidth=1, label="nothing frozen")
    for (setting, _), s in summary.items():
        if is_lora(setting):
            ax.axhline(s["mean"], color="tab:green", linestyle=":", linewidth=1.5, label=setting)
    ax.set_xlabel("k: embeddings and the lower k layers frozen")
    ax.set_ylabel("dev accuracy")
    ax.set_xticks(ks)
    time_ax = ax.twinx()
    time_ax.plot(ks, [s["seconds_per_epoch"] for _, s in points], color="tab:orange", marker="s", label="s/epoch")
    time_ax.set_ylabel("seconds per epoch", color="tab:orange")
    time_ax.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()[0] + time_ax.get_legend_handles_labels()[0]
    ax.legend(lines, [h.get_label() for h in lines], fontsize=8, loc="lower left")
    ax.set_title("Freezing the lower layers: accuracy and the cost of an epoch")
    ax.grid(True, alpha=0.3)
    return ax


def verdicts(freezing_runs, tactic_runs, pretraining_runs) -> list[str]:
    """The text's claims, read off the runs."""
    lines = []
    freezing = summarize(freezing_runs)
    full = freezing[("nothing frozen", freezing_runs[0].train_size)]
    points = sorted((s["k"], s) for s in freezing.values() if s["k"] is not None)
    deepest = points[-1]
    lines.append(f"the head alone (k={deepest[0]}) is the cheapest: its epoch takes "
                 f"{deepest[1]['seconds_per_epoch'] / full['seconds_per_epoch']:.2f}x full fine-tuning's and it stores "
                 f"{deepest[1]['bytes_per_task'] / 2**20:.3f} MiB, at {100 * (full['mean'] - deepest[1]['mean']):.1f} "
                 f"points under it: {'agrees' if deepest[1]['seconds_per_epoch'] == min(s['seconds_per_epoch'] for _, s in points) else 'DISAGREES'}")
    within = [k for k, s in points if full["mean"] - s["mean"] <= full["std"] + s["std"] + 0.01]
    below_top = [k for k, _ in points[:-1]]
    cheaper = all(points[i + 1][1]["seconds_per_epoch"] <= points[i][1]["seconds_per_epoch"] * 1.05
                  for i in range(len(points) - 1))
    lines.append(f"an epoch gets cheaper as more layers freeze (the backward pass stops at layer k): "
                 f"{'agrees' if cheaper else 'DISAGREES'} ("
                 + ", ".join(f"k={k} {s['seconds_per_epoch']:.1f} s" for k, s in points) + ")")
    kept = [k for k in below_top if k in within]
    if kept:
        best = dict(points)[max(kept)]
        lines.append(f"between the extremes: k={', '.join(map(str, kept))} of k={', '.join(map(str, below_top))} "
                     f"stay within the seeds' spread (+1 point) of full fine-tuning's {full['mean']:.3f}; the "
                     f"deepest, k={max(kept)}, trains {100 * best['trainable'] / full['trainable']:.0f}% of the "
                     f"parameters in {best['seconds_per_epoch'] / full['seconds_per_epoch']:.2f}x the time")
    else:
        lines.append(f"between the extremes: no k of {', '.join(map(str, below_top))} stays within the seeds' "
                     f"spread (+1 point) of full fine-tuning's {full['mean']:.3f} in this run")
    for (setting, _), s in freezing.items():
        if is_lora(setting):
            lines.append(f"{setting}: {100 * s['trainable'] / full['trainable']:.2f}% of the parameters, "
                         f"{s['bytes_per_task'] / 2**20:.2f} MiB a task, an epoch in {s['seconds_per_epoch'] / full['seconds_per_epoch']:.2f}x "
                         f"full fine-tuning's (its backward pass still runs through every layer), "
                         f"{100 * (s['mean'] - full['mean']):+.1f} points against it")
    tactic = summarize(tactic_runs)
    neither = tactic[("neither", tactic_runs[0].train_size)]
    ranked = sorted(((name, s) for (name, _), s in tactic.items() if name != "neither"), key=lambda x: -x[1]["mean"])
    helps = [name for name, s in ranked if s["mean"] - neither["mean"] > s["std"] + neither["std"]]
    lines.append(f"tactics at a high lr: neither {neither['mean']:.3f} ± {neither['std']:.3f}; "
                 + ", ".join(f"{name} {s['mean'] - neither['mean']:+.3f}" for name, s in ranked)
                 + (f"; beyond both spreads: {', '.join(helps)}, so {helps[0]} does the most work in this run" if helps
                    else "; none moves the mean by more than the two spreads together, so in this run no tactic "
                         "is shown to do the work"))
    pre = summarize(pretraining_runs)
    small = min(size for _, size in pre)
    gap = 100 * (pre[("pretrained", small)]["mean"] - pre[("random init", small)]["mean"])
    lines.append(f"with {small} labelled sentences the pretrained encoder reads {pre[('pretrained', small)]['mean']:.3f} "
                 f"and the same architecture from random weights {pre[('random init', small)]['mean']:.3f} "
                 f"({gap:+.1f} points): the encoder 'only has to teach the task, not the language': "
                 f"{'agrees' if gap > 5 else 'DISAGREES'}")
    return lines
