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

Every run is one ``experiments`` spec through the run store (lesson 3c reads the same runs),
and every accuracy claim is a paired comparison over the seeds (``experiments.compare``).

Houlsby adapters are counted in ``costs`` but not trained here: the library that builds
them for BERT (AdapterHub's ``adapters``) pins an older transformers (see ``costs.HOULSBY_NOTE``).
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
from torch import nn
from tqdm.auto import tqdm

from . import config
# The methods live in ``methods`` (the experiment engine builds them too); named here as well.
from .methods import (EVERY_PROJECTION, FROZEN, METHOD_NAMES, METHODS, NUM_VIRTUAL_TOKENS,  # noqa: F401
                      Method, PromptTunedEncoder, build_model, method, trainable_split)
from .report import Table


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
class Frontier:
    """Every method's sweep (``choices``: its lr chosen on validation with the first seed) and
    its runs at that lr (``chosen``: one record per seed, the sweep's own run first)."""

    choices: dict  # method -> experiments.Choice
    chosen: dict  # method -> [RunRecord], one per seed
    head_lr: float

    @property
    def records(self) -> list:
        return [r for group in self.chosen.values() for r in group]


def spec(name: str, lr: float, profile=None, seed: int = 0, head_lr: float | None = None):
    """The frontier's run of method ``name``: the profile's frontier budget (``frontier_epochs``
    of ``regime_batch_size``), the head reading ``frozen_pooling``, the recipe's warmup. The
    head trains at ``head_lr`` (the frozen head's own sweep trains it at ``lr``)."""
    from .experiments import RunSpec

    profile = config.get_profile(profile)
    return RunSpec(method=method(name).name, lr=lr, seed=seed, head_lr=None if name == FROZEN else head_lr,
                   epochs=profile.frontier_epochs, batch_size=profile.regime_batch_size, pooling=profile.frozen_pooling)


def frontier(encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, dev: datasets.Dataset,
             profile=None, methods=METHODS, seeds=(0, 1, 2), num_labels: int = 2, store=None) -> Frontier:
    """Every method: its lr swept on ``validation`` with the first seed (``experiments.choose_lr``,
    the grid extended past an edge), then the chosen lr trained with the other seeds. Every run
    goes through the run store: another lesson asking the same run reads it.

    The frozen head goes first: the head lr its sweep chooses is every other method's head
    lr, so the same head, trained the same way, sits on every method."""
    from . import experiments

    profile = config.get_profile(profile)
    methods = sorted(methods, key=lambda m: m.name != FROZEN)
    choices, chosen, head_lr = {}, {}, None
    for m in tqdm(methods, desc="frontier"):
        choice = experiments.choose_lr(spec(m.name, m.lrs[0], profile, seeds[0], head_lr), m.lrs, encoder, train,
                                       validation, dev, store=store)
        if m.name == FROZEN:
            head_lr = choice.lr
        choices[m.name] = choice
        chosen[m.name] = [choice.best] + [
            experiments.run(spec(m.name, choice.lr, profile, seed, head_lr), encoder, train,
                            {"validation": validation, "dev": dev}, num_labels, store=store)
            for seed in seeds[1:]]
    return Frontier(choices, chosen, head_lr)


# ----------------------------------------------------------------------------- the canonical comparison

#: The comparison every lesson makes on SST-2: the frozen head, LoRA r=8 and full fine-tuning.
CANONICAL_METHODS = (FROZEN, "LoRA r=8", "full fine-tuning")


def canonical_splits(profile=None, tokenizer=None):
    """SST-2 as this lesson sizes it, tokenised: ``(train, validation, dev)``. ``validation`` is
    carved from the training split (``profile.frontier_validation_size``, seed 0) and ``train``
    (``frontier_train_size`` sentences) is drawn from the rest; ``dev`` is GLUE's dev set, the
    split every lesson reports."""
    from . import data, models
    from .regimes import tokenize_sentences

    profile = config.get_profile(profile)
    tokenizer = tokenizer or models.load_tokenizer(profile=profile)
    sst2 = data.load_sst2(profile, full=True)
    rest, held_out = data.carve_validation(sst2["train"], profile.frontier_validation_size)
    return (tokenize_sentences(data.subsample(rest, profile.frontier_train_size), tokenizer, profile.max_length),
            tokenize_sentences(held_out, tokenizer, profile.max_length),
            tokenize_sentences(data.subsample(sst2["validation"], profile.frontier_eval_size), tokenizer,
                               profile.max_length))


def canonical(profile=None, encoder=None, tokenizer=None, store=None, splits=None, seeds=None) -> Frontier:
    """The course's canonical comparison: ``CANONICAL_METHODS`` on ``canonical_splits`` (or the
    ``(train, validation, dev)`` a lesson already holds), at this lesson's budget and seeds (the
    profile's ``frontier_seeds`` unless given), each at the lr its validation sweep chose. One set
    of runs, from the run store: lessons 1, 3b and 3c quote these very records, so the comparison
    has one answer wherever it appears."""
    from . import models

    profile = config.get_profile(profile)
    encoder = encoder if encoder is not None else models.load_encoder(profile, add_pooling_layer=False)
    train, validation, dev = splits or canonical_splits(profile, tokenizer)
    return frontier(encoder, train, validation, dev, profile, methods=[method(n) for n in CANONICAL_METHODS],
                    seeds=seeds or profile.frontier_seeds, store=store)


# ----------------------------------------------------------------------------- reading it


def versus(result: Frontier, a: str, b: str):
    """Method ``a`` against method ``b``: the paired difference of their dev accuracy over the seeds."""
    from .experiments import by_seed, paired

    return paired(by_seed(result.chosen[a]), by_seed(result.chosen[b]), a, b)


def canonical_figures(result: Frontier) -> list[tuple]:
    """Headline figures for the canonical runs: each method's mean dev accuracy x100 over its seeds,
    named alike in every lesson that quotes them (``tests/test_canonical_runs.py`` compares them)."""
    from .experiments import summarize as over_seeds

    return [(f"{name}, the canonical runs (lesson 3b), mean of {len(runs)} seeds",
             100 * over_seeds(runs)[name]["mean"], None, "accuracy x100") for name, runs in result.chosen.items()]


def seeds_line(result: Frontier) -> str:
    """Each method's dev accuracy seed by seed, and the budget they share."""
    first = next(iter(result.chosen.values()))[0]
    return (f"{first.train_size} sentences, {first.steps} steps a run, seeds {[r.seed for r in next(iter(result.chosen.values()))]}: "
            + "; ".join(f"{name} {[round(r.dev, 3) for r in runs]}" for name, runs in result.chosen.items()))





def summarize(result: Frontier) -> dict:
    """method -> lr, dev mean, std and interval over seeds, parameters, bytes per task, s/epoch, peak memory."""
    from .experiments import summarize as over_seeds

    return over_seeds(result.records)


def comparisons(result: Frontier, against: str = "full fine-tuning") -> dict:
    """method -> its paired comparison with ``against`` over the seeds they share (dev accuracy)."""
    from .experiments import by_seed, paired

    if against not in result.chosen:
        return {}
    base = by_seed(result.chosen[against])
    return {name: paired(by_seed(group), base, name, against) for name, group in result.chosen.items() if name != against}


def sweep_table(result: Frontier) -> Table:
    """Every sweep run: the lr tried and its validation accuracy; the chosen one is marked."""
    rows = []
    for name, choice in result.choices.items():
        for r in sorted(choice.tried, key=lambda r: r.lr):
            mark = "chosen" if r.lr == choice.lr else ""
            if mark and choice.at_edge:
                mark += " (still at the grid's end after its extensions)"
            rows.append([name, r.lr, r.validation, mark])
    return Table(["method", "lr", "validation accuracy", ""], rows,
                 formats={"lr": "{:g}", "validation accuracy": "{:.3f}"},
                 notes=["each method's grid grows one step (x4) past the end its best lr was at, up to twice"])


def frontier_table(result: Frontier, encoder_parameters: int) -> Table:
    """The closing note's table: method, trainable, share, MiB per task, validation lr, dev
    mean ± std, its paired difference with full fine-tuning, s/epoch, peak MiB."""
    summary, against = summarize(result), comparisons(result)
    rows = []
    for name, s in summary.items():
        trainable = s["method_parameters"] + s["head_parameters"]
        c = against.get(name)
        versus = ("(the reference)" if name == "full fine-tuning" else "") if c is None else \
            f"{c.mean:+.1f} [{c.low:+.1f}, {c.high:+.1f}] {c.outcome}"
        rows.append([name, trainable, 100 * s["method_parameters"] / encoder_parameters, s["bytes_per_task"] / 2**20,
                     s["lr"], f"{s['mean']:.3f} ± {s['std']:.3f}", versus, s["seconds_per_epoch"],
                     s["peak_memory_bytes"] / 2**20])
    n = next(iter(summary.values()))["n"]
    return Table(["method", "trainable", "share %", "MiB per task", "validation lr", f"dev (n={n})",
                  "- full fine-tuning (points, 95% CI)", "s/epoch", "peak MiB"], rows,
                 formats={"share %": "{:.3f}", "MiB per task": "{:,.3f}", "validation lr": "{:g}",
                          "s/epoch": "{:.1f}", "peak MiB": "{:,.0f}"},
                 notes=["share: the method's own parameters (head excluded) over the encoder's; the head is "
                        "trained in every row", "dev: mean ± std over seeds at the lr chosen on validation",
                        "- full fine-tuning: the paired difference over the same seeds and its interval; "
                        "'tie' where the interval holds zero"])


def pareto_front(result: Frontier) -> list[str]:
    """The methods no other method beats, by the paired comparison over seeds, with no more
    trainable parameters. Ordered by parameters. A method inside another's noise is not
    dominated by it: only a difference the seeds resolve removes a method from the front."""
    from .experiments import by_seed, paired

    summary = summarize(result)
    scores = {name: by_seed(group) for name, group in result.chosen.items()}

    def trainable(name):
        return summary[name]["method_parameters"] + summary[name]["head_parameters"]

    front = [a for a in summary if not any(
        trainable(b) <= trainable(a) and paired(scores[b], scores[a], b, a).outcome == "beats"
        for b in summary if b != a)]
    return sorted(front, key=trainable)


def plot_frontier(result: Frontier, ax=None):
    """Dev accuracy against trainable parameters (log axis), one point per method with its
    95% interval over seeds; marker area grows with seconds per epoch. Full fine-tuning and the
    frozen head are the reference lines; the Pareto front is drawn and named."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.8))
    summary = summarize(result)
    slowest = max(s["seconds_per_epoch"] for s in summary.values()) or 1.0
    for name, s in summary.items():
        x = s["method_parameters"] + s["head_parameters"]
        ax.errorbar(x, s["mean"], yerr=[[s["mean"] - s["low"]], [s["high"] - s["mean"]]], fmt="none", ecolor="0.5",
                    capsize=3)
        ax.scatter(x, s["mean"], s=30 + 220 * s["seconds_per_epoch"] / slowest, alpha=0.8, label=name)
    for name, style in (("full fine-tuning", "--"), ("frozen + linear head", ":")):
        if name in summary:
            ax.axhline(summary[name]["mean"], color="0.4", linestyle=style, linewidth=1, label=f"{name}: its mean")
    front = pareto_front(result)
    xs = [summary[n]["method_parameters"] + summary[n]["head_parameters"] for n in front]
    ax.plot(xs, [summary[n]["mean"] for n in front], color="black", linewidth=1, label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters (log scale; marker area: seconds per epoch)")
    ax.set_ylabel("dev accuracy")
    ax.set_title("The parameter-efficient frontier: one encoder, one task, one budget")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, alpha=0.3)
    return ax


def verdicts(result: Frontier) -> list[str]:
    """The seed's claims, computed: which methods tie with, trail or beat full fine-tuning
    (paired over the seeds, with the interval); whether any saves training time, or only
    memory and storage; where prompt tuning falls."""
    summary, against = summarize(result), comparisons(result)
    full = summary["full fine-tuning"]
    n = full["n"]
    groups = {outcome: [name for name, c in against.items() if c.outcome == outcome]
              for outcome in ("beats", "tie", "trails", "undecided")}
    lines = [f"against full fine-tuning's {full['mean']:.3f} (paired over {n} seeds, 95% CI): "
             + "; ".join(f"{label}: {', '.join(f'{name} ({against[name].mean:+.1f})' for name in groups[outcome])}"
                         for outcome, label in (("beats", "beat it"), ("tie", "tie with it"), ("trails", "trail it"),
                                                ("undecided", "undecided (one seed)"))
                         if groups[outcome])]
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
    if "prompt tuning" in against:
        c = against["prompt tuning"]
        below = sum(s["mean"] > summary["prompt tuning"]["mean"] for name, s in summary.items() if name != "prompt tuning")
        reading = {"trails": "agrees", "beats": "DISAGREES", "tie": "not resolved by these seeds (a tie)",
                   "undecided": "undecided (one seed)"}[c.outcome]
        lines.append(f"prompt tuning: {c.verdict}; {below} of {len(summary) - 1} methods above it. Lester et al. "
                     f"(2021) found the gap closes only at billions of parameters, so at this size it should stay "
                     f"open: {reading}")
    return lines
