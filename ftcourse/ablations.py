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

Every run is one ``experiments`` spec (``training.train``: AdamW, linear decay, clipping) on
lesson 3b's sentences and budget, through the run store: 3b's frozen head, LoRA and full
fine-tuning are read, not trained again. Every lr is chosen on the validation part carved from
the training split, never on the reported dev split, and every accuracy claim is a paired
comparison over the seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from torch import nn
from tqdm.auto import tqdm

from . import config, data
# The builders live in ``methods`` (the experiment engine builds them too); named here as well.
from .methods import encoder_depth, freeze_lower, freezing_depths, reinitialized  # noqa: F401
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
RANDOM_INIT = "random init"


# ----------------------------------------------------------------------------- the studies


def _reference(encoder, train, validation, dev, profile, seeds, store):
    """Lesson 3b's runs this lesson stands on: the frozen head, LoRA r=8 and full fine-tuning,
    each at the lr its validation sweep chose, over ``seeds`` (read from the run store)."""
    from . import frontier

    return frontier.canonical(profile, encoder, store=store, splits=(train, validation, dev), seeds=seeds)


@dataclass
class Study:
    """One study's runs, by the label each row carries (one record per seed), and the choice
    of lr behind each row that chose one on validation."""

    rows: dict  # label -> [RunRecord]
    choices: dict = field(default_factory=dict)  # label -> experiments.Choice
    reference: object = None  # the frontier runs it reads (frontier.Frontier)

    @property
    def records(self) -> list:
        return [r for group in self.rows.values() for r in group]


def _seeded(spec, encoder, train, scored, seeds, store):
    from .experiments import run

    return [run(spec.with_(seed=seed), encoder, train, scored, store=store) for seed in seeds]


def partial_freezing(encoder: nn.Module, train, validation, dev, profile=None, ks=None, seeds=(0, 1, 2),
                     store=None) -> Study:
    """Full fine-tuning (3b's runs), then the embeddings and the lower ``k`` layers frozen for
    each ``k`` (default ``freezing_depths``), each ``k`` at its own lr chosen on ``validation``
    over full fine-tuning's grid, then LoRA r=8 (3b's runs). Every ``k`` trains the same head
    at 3b's head lr for the same steps. ``k`` = the depth is the head alone: 3b's frozen head."""
    from . import experiments, frontier

    profile = config.get_profile(profile)
    depth = encoder_depth(encoder)
    ks = freezing_depths(encoder) if ks is None else ks
    reference = _reference(encoder, train, validation, dev, profile, seeds, store)
    scored = {"validation": validation, "dev": dev}
    study = Study({"nothing frozen": [r.labelled("nothing frozen") for r in reference.chosen["full fine-tuning"]]},
                  reference=reference)
    grid = frontier.method("full fine-tuning").lrs
    for k in tqdm(ks, desc="partial freezing"):
        label = f"k={k}"
        if k == depth:  # every layer frozen: the head alone, which 3b already trained
            study.rows[label] = [r.labelled(label) for r in reference.chosen[frontier.FROZEN]]
            continue
        base = frontier.spec("full fine-tuning", grid[0], profile, seeds[0], reference.head_lr).with_(method=label)
        choice = experiments.choose_lr(base, grid, encoder, train, validation, dev, store=store, progress=False)
        study.choices[label] = choice
        study.rows[label] = [choice.best] + _seeded(base.with_(lr=choice.lr), encoder, train, scored, seeds[1:], store)
    study.rows["LoRA r=8"] = list(reference.chosen["LoRA r=8"])
    return study


def tactic_settings(encoder: nn.Module) -> dict:
    """Each tactic alone, both schedule tactics, and none, as ``(RunSpec changes, k)``:
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


def tactics(encoder: nn.Module, train, validation, dev, profile=None, seeds=(0, 1, 2), store=None) -> Study:
    """Every ``tactic_settings`` entry for every seed, at ``TACTIC_LR_SCALE`` x the lr full
    fine-tuning's validation sweep chose (3b's), with 3b's head lr."""
    from . import frontier

    profile = config.get_profile(profile)
    reference = _reference(encoder, train, validation, dev, profile, seeds, store)
    lr = TACTIC_LR_SCALE * reference.choices["full fine-tuning"].lr
    scored = {"validation": validation, "dev": dev}
    study = Study({}, reference=reference)
    for name, (changes, k) in tqdm(tactic_settings(encoder).items(), desc="tactics"):
        base = frontier.spec("full fine-tuning", lr, profile, seeds[0], reference.head_lr).with_(**changes)
        if k is not None:
            base = base.with_(method=f"k={k}")
        study.rows[name] = [r.labelled(name) for r in _seeded(base, encoder, train, scored, seeds, store)]
    return study


def pretraining(encoder: nn.Module, pool, validation, dev, profile=None, sizes=None, seeds=(0, 1, 2),
                store=None) -> Study:
    """Full fine-tuning from the pretrained weights and from ``reinitialized`` ones, at each
    labelled-set size (default ``SMALL_SIZE`` and the whole ``pool``; seed ``s`` draws its own
    subset), for the same optimiser steps (one epoch over the pool; a small set repeats). Each
    start trains at its own lr chosen on ``validation`` over the whole pool: the pretrained
    one is 3b's full fine-tuning (its runs are the pool's rows), the random one sweeps the
    same grid, extended past its edges."""
    from . import experiments, frontier

    profile = config.get_profile(profile)
    reference = _reference(encoder, pool, validation, dev, profile, seeds, store)
    sizes = sorted({min(SMALL_SIZE, len(pool)), len(pool)}) if sizes is None else sorted(sizes)
    steps = math.ceil(len(pool) / profile.regime_batch_size)
    grid = frontier.method("full fine-tuning").lrs
    random_base = frontier.spec("full fine-tuning", grid[0], profile, seeds[0], reference.head_lr).with_(method=RANDOM_INIT)
    random_choice = experiments.choose_lr(random_base, grid, encoder, pool, validation, dev, store=store,
                                          progress=False)
    lrs = {"pretrained": reference.choices["full fine-tuning"].lr, RANDOM_INIT: random_choice.lr}
    study = Study({}, choices={RANDOM_INIT: random_choice}, reference=reference)
    scored = {"validation": validation, "dev": dev}
    for size in tqdm(sizes, desc="pretraining"):
        epochs = math.ceil(steps / math.ceil(size / profile.regime_batch_size))
        for start, method_name in (("pretrained", "full fine-tuning"), (RANDOM_INIT, RANDOM_INIT)):
            spec = frontier.spec("full fine-tuning", lrs[start], profile, 0, reference.head_lr).with_(
                method=method_name, epochs=epochs)
            study.rows[f"{start}, {size}"] = [
                experiments.run(spec.with_(seed=seed), encoder, data.subsample(pool, size, seed=seed), scored,
                                store=store).labelled(f"{start}, {size}") for seed in seeds]
    return study


def is_lora(setting: str) -> bool:
    """Whether a partial-freezing study's setting is its LoRA row, which the table, the plot
    and the verdicts set apart from the k rows."""
    return setting.startswith("LoRA")


# ----------------------------------------------------------------------------- reading them


def _summary(study: Study) -> dict:
    from .experiments import summarize

    return summarize(study.records)


def _dev(s: dict) -> str:
    return f"{s['mean']:.3f} ± {s['std']:.3f}" if s["n"] > 1 else f"{s['mean']:.3f}"


def _versus(study: Study, label: str, against: str):
    from .experiments import by_seed, paired

    return paired(by_seed(study.rows[label]), by_seed(study.rows[against]), label, against)


def _cell(c) -> str:
    return f"{c.mean:+.1f} [{c.low:+.1f}, {c.high:+.1f}] {c.outcome}"


def partial_freezing_table(study: Study, encoder_parameters: int) -> Table:
    summary = _summary(study)
    full = summary["nothing frozen"]
    rows = [[setting, s["trainable"], 100 * s["trainable"] / encoder_parameters, s["bytes_per_task"] / 2**20,
             s["lr"], s["seconds_per_epoch"], s["seconds_per_epoch"] / full["seconds_per_epoch"], _dev(s),
             "(the reference)" if setting == "nothing frozen" else _cell(_versus(study, setting, "nothing frozen"))]
            for setting, s in summary.items()]
    return Table(["lower layers frozen", "trainable", "share %", "MiB per task", "lr", "s/epoch", "x full",
                  f"dev (n={full['n']})", "- nothing frozen (points, 95% CI)"], rows,
                 formats={"share %": "{:.1f}", "MiB per task": "{:,.2f}", "lr": "{:g}", "s/epoch": "{:.1f}",
                          "x full": "{:.2f}"},
                 notes=["k: the embeddings and the lower k Transformer layers frozen (k=0: the embeddings only); "
                        "LoRA: every pretrained weight frozen, rank-8 updates on query and value trained",
                        "MiB per task: the trained layers and head, beside a shared frozen backbone; "
                        "nothing frozen stores the whole model",
                        f"{full['steps']} optimiser steps each; every row's lr chosen on validation (the head "
                        "alone: its own rate; nothing frozen, LoRA and the head alone are lesson 3b's runs)",
                        "- nothing frozen: the paired difference over the same seeds; 'tie' where its interval holds zero",
                        *[choice.line(label) for label, choice in study.choices.items()]])


def tactics_table(study: Study) -> Table:
    summary = _summary(study)
    first = next(iter(summary.values()))
    rows = [[setting, _dev(s), ", ".join(f"{r.accuracy:.3f}" for r in sorted(study.rows[setting], key=lambda r: r.seed)),
             "(the reference)" if setting == "neither" else _cell(_versus(study, setting, "neither"))]
            for setting, s in summary.items()]
    warmup_steps = int(WARMUP_RATIO * first["steps"])
    return Table(["tactic", f"dev (n={first['n']})", "each seed", "- neither (points, 95% CI)"], rows,
                 notes=[f"every run: lr {first['lr']:g} ({TACTIC_LR_SCALE:g}x the rate full fine-tuning's sweep "
                        f"chose), {first['steps']} steps, linear decay and clipping; warmup {WARMUP_RATIO:.0%} of the "
                        f"steps ({warmup_steps} here); layer decay {LAYER_DECAY}"])


def pretraining_table(study: Study) -> Table:
    summary = _summary(study)
    rows = []
    for size in sorted({s["train_size"] for s in summary.values()}):
        pre, rand = f"pretrained, {size}", f"{RANDOM_INIT}, {size}"
        rows.append([size, _dev(summary[pre]), _dev(summary[rand]), _cell(_versus(study, pre, rand)),
                     summary[pre]["steps"], f"{summary[pre]['lr']:g} / {summary[rand]['lr']:g}"])
    return Table(["labelled sentences", "pretrained", RANDOM_INIT, "gap (points, 95% CI)", "steps", "lr (each start's)"],
                 rows, notes=["the same architecture, recipe and number of optimiser steps; a small set repeats; "
                              "each start at its own lr chosen on validation",
                              *[choice.line(label) for label, choice in study.choices.items()]])


def plot_partial_freezing(study: Study, ax=None):
    """Dev accuracy (mean and 95% interval) and seconds per epoch against ``k``, on two axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    summary = _summary(study)
    points = sorted((s["k"] if s["k"] is not None else int(setting[2:]), s) for setting, s in summary.items()
                    if setting.startswith("k="))
    ks = [k for k, _ in points]
    ax.errorbar(ks, [s["mean"] for _, s in points], yerr=[[s["mean"] - s["low"] for _, s in points],
                                                         [s["high"] - s["mean"] for _, s in points]],
                marker="o", capsize=3, label="dev accuracy (95% CI)")
    ax.axhline(summary["nothing frozen"]["mean"], color="0.4", linestyle="--", linewidth=1, label="nothing frozen")
    for setting, s in summary.items():
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


def _k_of(setting: str) -> int:
    return int(setting[2:])


def verdicts(freezing: Study, tactic: Study, pretrained: Study, majority: float | None = None) -> list[str]:
    """The text's claims, read off the runs; every accuracy claim by a paired comparison over
    the seeds (``experiments.compare``), a tie where its interval holds zero."""
    lines = []
    summary = _summary(freezing)
    full = summary["nothing frozen"]
    points = sorted((_k_of(name), s) for name, s in summary.items() if name.startswith("k="))
    deepest_k, deepest = points[-1]
    cheapest = deepest["seconds_per_epoch"] == min(s["seconds_per_epoch"] for _, s in points)
    lines.append(f"the head alone (k={deepest_k}) is the cheapest: its epoch takes "
                 f"{deepest['seconds_per_epoch'] / full['seconds_per_epoch']:.2f}x full fine-tuning's and it stores "
                 f"{deepest['bytes_per_task'] / 2**20:.3f} MiB: {'agrees' if cheapest else 'DISAGREES'}")
    cheaper = all(points[i + 1][1]["seconds_per_epoch"] <= points[i][1]["seconds_per_epoch"] * 1.05
                  for i in range(len(points) - 1))
    lines.append(f"an epoch gets cheaper as more layers freeze (the backward pass stops at layer k): "
                 f"{'agrees' if cheaper else 'DISAGREES'} ("
                 + ", ".join(f"k={k} {s['seconds_per_epoch']:.1f} s" for k, s in points) + ")")
    against = {k: _versus(freezing, f"k={k}", "nothing frozen") for k, _ in points}
    level = [k for k, c in against.items() if c.outcome in ("tie", "beats")]
    lines.append("between the extremes, against nothing frozen (paired, 95% CI): "
                 + "; ".join(f"k={k} {against[k].mean:+.1f} [{against[k].low:+.1f}, {against[k].high:+.1f}] "
                             f"{against[k].outcome}" for k, _ in points)
                 + (f". The deepest k not shown worse, k={max(level)}, trains "
                    f"{100 * dict(points)[max(level)]['trainable'] / full['trainable']:.0f}% of the parameters in "
                    f"{dict(points)[max(level)]['seconds_per_epoch'] / full['seconds_per_epoch']:.2f}x the time"
                    if level else ". Every k is shown worse than nothing frozen here"))
    for name, s in summary.items():
        if is_lora(name):
            c = _versus(freezing, name, "nothing frozen")
            lines.append(f"{name}: {100 * s['trainable'] / full['trainable']:.2f}% of the parameters, "
                         f"{s['bytes_per_task'] / 2**20:.2f} MiB a task, an epoch in "
                         f"{s['seconds_per_epoch'] / full['seconds_per_epoch']:.2f}x full fine-tuning's (its backward "
                         f"pass still runs through every layer); {c.verdict}")
    effects = {name: _versus(tactic, name, "neither") for name in tactic.rows if name != "neither"}
    helps = [name for name, c in effects.items() if c.outcome == "beats"]
    lines.append("tactics at a high lr, each against neither (paired, 95% CI): "
                 + "; ".join(f"{name} {c.mean:+.1f} [{c.low:+.1f}, {c.high:+.1f}] {c.outcome}"
                             for name, c in effects.items())
                 + (f". Shown to help: {', '.join(helps)}" if helps else
                    ". None is shown to help at these seeds: every interval holds zero or lies below it"))
    sizes = sorted({s["train_size"] for s in _summary(pretrained).values()})
    small = sizes[0]
    c = _versus(pretrained, f"pretrained, {small}", f"{RANDOM_INIT}, {small}")
    random_mean = _summary(pretrained)[f"{RANDOM_INIT}, {small}"]["mean"]
    chance = (f"; the random start reads {random_mean:.3f} against the majority class's {majority:.3f}"
              if majority is not None else "")
    reading = {"beats": "agrees", "tie": "not resolved by these seeds (a tie)", "trails": "DISAGREES",
               "undecided": "undecided (one seed)"}[c.outcome]
    lines.append(f"with {small} labelled sentences: {c.verdict}{chance}. The encoder 'only has to teach the task, "
                 f"not the language': {reading}")
    return lines
