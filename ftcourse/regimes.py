"""Three regimes on the same data and budget: frozen + linear head, LoRA, full fine-tuning.

- ``frozen``: the encoder runs once over the data; its final states, pooled ([CLS] or mean;
  the profile's ``frozen_pooling``), are cached and a linear head is trained on them
  (``train_linear_probe``). Only the head is stored.
- ``lora``: LoRA (``ftcourse.lora``) on the attention's query and value, plus the head.
- ``finetune``: every weight trains (``ftcourse.heads.set_regime(..., "finetune")``).

``run_regime`` trains one regime on one labelled set and measures what the lesson compares:
dev accuracy, trainable parameters, seconds per epoch, peak memory and bytes to store per
task. ``learning_curve`` repeats it over labelled-set sizes and seeds.

Budget: a small set is repeated for more epochs, so every run sees at least
``min_examples`` examples (``epochs_for``): with 32 examples and one epoch, fine-tuning
would take two optimiser steps, and the curve would measure the step count, not the data.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from dataclasses import asdict, dataclass

import datasets
import torch
from torch import nn
from tqdm.auto import tqdm

from . import cache, config, heads, lora, models, training
from .report import Table

REGIMES = ("frozen", "lora", "finetune")
PROBE_STEPS = 300  # full-batch steps of the linear probe: it converges, and costs milliseconds
PROBE_WEIGHT_DECAY = 1e-2
FEATURES_FORMAT = 1  # bump when the cached file layout changes


# ----------------------------------------------------------------------------- data


def tokenize_sentences(dataset: datasets.Dataset, tokenizer, max_length: int, text="sentence",
                       label: str = "label") -> datasets.Dataset:
    """Rows of a classification set as token ids and ``labels`` for ``training``. ``text`` is
    the text column, or two columns for a sentence pair (``[CLS] a [SEP] b [SEP]``), e.g.
    ``("sentence1", "sentence2")``; ``label`` the label column. SST-2's are the defaults."""
    columns = (text,) if isinstance(text, str) else tuple(text)
    missing = [c for c in (*columns, label) if c not in dataset.column_names]
    if missing or not 1 <= len(columns) <= 2:
        raise ValueError(f"The dataset has columns {dataset.column_names}; asked for text {columns} and label "
                         f"{label!r}{f', missing {missing}' if missing else ''}. Fix: pass text= (one column, or two "
                         "for a pair) and label= with the names of its columns.")
    from .data import tokenize  # the one tokenization path for sentences and pairs

    return tokenize(dataset, tokenizer, max_length, text=columns[0],
                    pair=columns[1] if len(columns) == 2 else None, label=label)


def num_labels_of(*splits: datasets.Dataset) -> int:
    """How many classes a head over these splits needs: the label names when the data carries
    them (a ``ClassLabel``), else one more than the largest label seen. A split with a label
    outside that range is an error that names it."""
    feature = splits[0].features.get("labels")
    found = [set(split["labels"]) for split in splits]
    if any(not labels for labels in found):
        raise ValueError("A split has no examples. Fix: check the dataset sizes in the profile.")
    count = len(feature.names) if isinstance(feature, datasets.ClassLabel) else max(max(f) for f in found) + 1
    for split, labels in zip(splits, found):
        outside = sorted(label for label in labels if not 0 <= label < count)
        if outside:
            raise ValueError(f"Labels {outside} are outside the head's {count} classes (0..{count - 1}). "
                             "Fix: map the labels to 0..n-1, or build the head with num_labels= for all of them.")
    return count


def tokenize_tags(dataset: datasets.Dataset, tokenizer, max_length: int) -> datasets.Dataset:
    """CoNLL-2003 rows (``tokens``, ``ner_tags``) as token ids with labels on first subtokens."""
    columns = dataset.select_columns(["tokens", "ner_tags"]).to_dict()
    encoded = heads.tokenize_for_tagging(tokenizer, columns["tokens"], columns["ner_tags"], max_length)
    return datasets.Dataset.from_dict(dict(encoded))


def epochs_for(size: int, min_examples: int, epochs: int = 1) -> int:
    """Epochs so a run over ``size`` examples sees at least ``min_examples`` (and ``epochs``)."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}.")
    return max(epochs, math.ceil(min_examples / size))


LR_FIELDS = {"frozen": "probe_lr", "lora": "lora_lr", "finetune": "finetune_lr"}


def budget_lrs(profile, steps: int) -> dict:
    """regime -> the lr it trains at for ``steps`` optimiser steps: the profile's
    ``learning_curve_lrs`` entry for that budget where there is one, else its own lr fields."""
    chosen = profile.learning_curve_lrs.get(steps, {})
    return {regime: chosen.get(regime, getattr(profile, name)) for regime, name in LR_FIELDS.items()}


def at_budget(profile, steps: int, factors: dict | None = None):
    """``profile`` with each regime's lr set for a budget of ``steps`` (``budget_lrs``), each
    scaled by ``factors.get(regime, 1)``."""
    factors = factors or {}
    return profile.with_(**{LR_FIELDS[regime]: factors.get(regime, 1.0) * lr
                            for regime, lr in budget_lrs(profile, steps).items()})


def steps_for(size: int, epochs: int, batch_size: int) -> int:
    """The optimiser steps of ``epochs`` over ``size`` examples in batches of ``batch_size``."""
    return epochs * math.ceil(size / batch_size)


def _steps_text(steps) -> str:
    return "/".join(map(str, steps))  # one value when every seed took the same


# ----------------------------------------------------------------------------- frozen features


@torch.inference_mode()
def sentence_features(encoder: nn.Module, data: datasets.Dataset, pooling: str = "cls",
                      batch_size: int = 128) -> torch.Tensor:
    """One final-layer vector per example, in the dataset's order: (n, hidden). ``pooling``
    is ``"cls"`` (the state at position 0, what BERT's classifier reads) or ``"mean"`` (the
    average over real tokens, what a sentence-pair-trained encoder was trained to offer)."""
    from .similarity import check_pooling, pool

    check_pooling(pooling)
    encoder.eval()
    data = data.remove_columns([c for c in ("labels",) if c in data.column_names])

    def pooled(batch):
        return pool(encoder(**batch).last_hidden_state, batch["attention_mask"], pooling).float()

    return torch.stack(training.in_dataset_order(pooled, data, batch_size))


def cached_features(encoder: nn.Module, data: datasets.Dataset, name: str,
                    pooling: str = "cls") -> tuple[torch.Tensor, float]:
    """``sentence_features``, kept in the feature cache (``ftcourse.cache``) under ``name`` and
    a key of the pooling, the encoder's weights (``models.fingerprint``) and the token ids:
    another encoder, tokenizer, max_length or subset gives another entry, so an entry is never
    stale. Returns the features and the seconds the extraction took (measured when it ran;
    0.0 when read from the cache)."""
    ids = hashlib.sha256()
    for row in data["input_ids"]:
        ids.update(bytes(str(row), "ascii"))
    key = {"kind": "sentence", "format": FEATURES_FORMAT, "pooling": pooling,
           "model_fingerprint": models.fingerprint(encoder), "input_ids": ids.hexdigest()[:16]}
    path = cache.entry_path(f"{name}-{pooling}", key)
    if path.is_file():
        return cache.load(path, expected_key=key)[0]["features"], 0.0
    start = time.perf_counter()
    features = sentence_features(encoder, data, pooling)
    seconds = time.perf_counter() - start
    cache.save(path, {"features": features}, key)
    return features, seconds


def train_linear_probe(features: torch.Tensor, labels: torch.Tensor, num_labels: int = 2, seed: int = 0,
                       steps: int = PROBE_STEPS, lr: float | None = None,
                       weight_decay: float = PROBE_WEIGHT_DECAY, profile=None) -> tuple[nn.Linear, float]:
    """A linear head on frozen features, trained full-batch with AdamW on standardised
    features (raw [CLS] dimensions differ in scale by orders of magnitude). The
    standardisation is then folded into the weights, so what is returned, and stored, is a
    plain ``nn.Linear`` over the raw features. Returns it and the seconds per epoch (one
    full-batch step is one epoch). ``lr`` defaults to ``profile``'s ``probe_lr``."""
    if len(features) != len(labels):
        raise ValueError(f"{len(features)} feature rows but {len(labels)} labels: they must be the same examples. "
                         "Fix: extract features from the same (tokenised) split the labels come from.")
    if len(features) == 0:
        raise ValueError("No training examples: the split is empty. Fix: check the dataset size in the profile.")
    if labels.min() < 0 or labels.max() >= num_labels:
        raise ValueError(f"Labels run from {int(labels.min())} to {int(labels.max())}, outside the head's "
                         f"{num_labels} classes. Fix: pass num_labels= (regimes.num_labels_of gives it).")
    lr = config.get_profile(profile).probe_lr if lr is None else lr
    torch.manual_seed(seed)
    mean, std = features.mean(0), features.std(0).clamp_min(1e-6)
    x = (features - mean) / std
    probe = nn.Linear(features.shape[1], num_labels)
    optimizer = torch.optim.AdamW(probe.parameters(), lr=lr, weight_decay=weight_decay)
    start = time.perf_counter()
    for _ in range(steps):
        loss = nn.functional.cross_entropy(probe(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():  # W (x - m) / s + b  ==  (W / s) x + (b - W m / s)
        probe.weight /= std
        probe.bias -= probe.weight @ mean
    return probe, seconds


# ----------------------------------------------------------------------------- one run


@dataclass
class RegimeResult:
    regime: str
    train_size: int
    seed: int
    epochs: int
    accuracy: float
    trainable: int  # parameters trained
    seconds_per_epoch: float
    peak_memory_bytes: int
    bytes_per_task: int  # what must be stored for this task beyond a shared backbone
    steps: int = 0  # optimiser steps the run took (the frozen head's are full-batch)

    def as_dict(self) -> dict:
        return asdict(self)


def accuracy_on(model, dev) -> float:
    """``model``'s classification accuracy on a tokenised split."""
    logits, labels = training.predict(model, dev)
    return training.accuracy(logits, labels)["accuracy"]


def run_regime(regime: str, encoder: nn.Module, train: datasets.Dataset, dev: datasets.Dataset, profile=None,
               seed: int = 0, epochs: int = 1, train_features=None, dev_features=None, rank: int | None = None,
               keep_model: bool = False, num_labels: int | None = None, probe_steps: int | None = None):
    """Train ``regime`` on ``train`` (a tokenised classification set, e.g. SST-2 through
    ``tokenize_sentences``) and score it on ``dev``. The head has ``num_labels`` classes,
    read from the data when not given (``num_labels_of``).

    ``encoder`` is never modified (LoRA and fine-tuning train a copy). For ``frozen``, pass
    the cached [CLS] features of ``train`` and ``dev``; its head takes ``probe_steps`` full-batch
    steps (default ``PROBE_STEPS``, enough to converge). Returns a ``RegimeResult``, and the
    trained model too when ``keep_model``.
    """
    if regime not in REGIMES:
        raise ValueError(f"Unknown regime {regime!r}. Known regimes: {', '.join(REGIMES)}.")
    profile = config.get_profile(profile)
    hidden = encoder.config.hidden_size
    num_labels = num_labels or num_labels_of(train, dev)
    labels = torch.as_tensor(train["labels"])
    if regime == "frozen":
        if train_features is None or dev_features is None:
            raise ValueError("The frozen regime trains on cached features: pass train_features and dev_features "
                             "(see cached_features).")
        with training.peak_memory() as peak:
            probe, seconds = train_linear_probe(train_features, labels, num_labels, seed=seed, lr=profile.probe_lr,
                                                steps=probe_steps or PROBE_STEPS)
        with torch.no_grad():
            predictions = probe(dev_features).argmax(-1)
        accuracy = (predictions == torch.as_tensor(dev["labels"])).float().mean().item()
        trainable = heads.count_parameters(probe)["trainable"]
        result = RegimeResult(regime, len(train), seed, 1, accuracy, trainable, seconds, peak["bytes"],
                              4 * trainable, probe_steps or PROBE_STEPS)
        return (result, probe) if keep_model else result

    torch.manual_seed(seed)  # the head's initialisation follows the seed
    backbone = copy.deepcopy(encoder)
    head = heads.SentenceClassifier(hidden, num_labels)
    if regime == "lora":
        model = lora.lora_task_model(backbone, head, rank=rank or profile.lora_rank)
        lr = profile.lora_lr
    else:
        model = heads.set_regime(heads.TaskModel(backbone, head), "finetune")
        lr = profile.finetune_lr
    settings = training.TrainConfig(lr=lr, head_lr=profile.head_lr, epochs=epochs,
                                    batch_size=profile.regime_batch_size,
                                    seed=seed, progress=False)
    with training.peak_memory() as peak:
        history = training.train(model, train, settings)
    counts = heads.count_parameters(model)
    stored = counts["trainable"] if regime == "lora" else counts["total"]
    result = RegimeResult(regime, len(train), seed, epochs, accuracy_on(model, dev), counts["trainable"],
                          history.seconds_per_epoch, peak["bytes"], 4 * stored, len(history.losses))
    return (result, model) if keep_model else result


# ----------------------------------------------------------------------------- the curve


def learning_curve(encoder: nn.Module, pool: datasets.Dataset, dev: datasets.Dataset, sizes, seeds,
                   profile=None, min_examples: int = 0, regimes=REGIMES, name: str = "sst2",
                   keep: tuple | None = None, pooling: str | None = None, equal_steps: bool = False,
                   epochs: int | None = None, lr_factor: float = 1.0):
    """``run_regime`` for every regime, labelled-set size and seed. A set of size ``n`` for
    seed ``s`` is ``n`` examples drawn from ``pool`` with seed ``s`` (the whole pool when
    ``n`` is its size). Features for the frozen regime are extracted once for the pool.

    ``keep=(size, seed)``: also return the trained models of that run, by regime. The frozen
    regime reads features pooled by ``pooling`` (default: the profile's ``frozen_pooling``).
    ``equal_steps``: the frozen head takes as many optimiser steps as the trained regimes do at
    that size, instead of training to convergence, so no regime gets a bigger budget than another.
    ``epochs``: the fewest a run trains (default the profile's ``epochs``). Each run trains at its
    regime's lr for its step budget (``at_budget``), times ``lr_factor`` (``recheck_at_lr``).
    Each result records its steps. Returns ``(results, kept_models)``."""
    profile = config.get_profile(profile)
    sizes = sorted(sizes)
    if sizes[-1] > len(pool):
        raise ValueError(f"The largest size {sizes[-1]} exceeds the pool of {len(pool)} examples.")
    pool_features = dev_features = None
    if "frozen" in regimes:
        pooling = pooling or profile.frozen_pooling
        pool_features, _ = cached_features(encoder, pool, f"{name}-train", pooling)
        dev_features, _ = cached_features(encoder, dev, f"{name}-dev", pooling)
    results, kept = [], {}
    runs = [(size, seed, regime) for size in sizes for seed in seeds for regime in regimes]
    for size, seed, regime in tqdm(runs, desc="learning curve"):
        indices = (list(range(len(pool))) if size == len(pool)
                   else torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:size].tolist())
        train = pool.select(indices)
        features = pool_features[indices] if pool_features is not None else None
        run_epochs = epochs_for(size, min_examples, epochs or profile.epochs)
        steps = steps_for(size, run_epochs, profile.regime_batch_size)
        result, model = run_regime(regime, encoder, train, dev, at_budget(profile, steps, {regime: lr_factor}),
                                   seed=seed, epochs=run_epochs, train_features=features, dev_features=dev_features,
                                   keep_model=True, probe_steps=steps if equal_steps else None)
        results.append(result)
        if keep == (size, seed):
            kept[regime] = model
    return results, kept


def summarize(results) -> dict:
    """(regime, size) -> {"mean", "std", "n", "steps", "by_seed"} of dev accuracy over seeds, the
    optimiser steps its runs took (a sorted tuple: one value when every seed took the same), and
    each seed's accuracy (what a paired comparison reads)."""
    groups: dict = {}
    for r in results:
        groups.setdefault((r.regime, r.train_size), []).append(r)
    summary = {}
    for key, runs in groups.items():
        t = torch.tensor([r.accuracy for r in runs])
        summary[key] = {"mean": t.mean().item(), "std": t.std().item() if len(runs) > 1 else 0.0,
                        "n": len(runs), "steps": tuple(sorted({r.steps for r in runs})),
                        "by_seed": {r.seed: r.accuracy for r in runs}}
    return summary


def compared(summary: dict, a: str, b: str, size: int):
    """``a`` against ``b`` at ``size``: the paired difference over their shared seeds
    (``experiments.compare.paired``; the same seed draws the same subset for both)."""
    from .experiments.compare import paired

    return paired(summary[(a, size)]["by_seed"], summary[(b, size)]["by_seed"], a, b)


def best_regime_by_size(summary: dict) -> dict:
    """size -> the regime with the highest mean dev accuracy, or ``"tie: a, b"`` naming every
    regime the top one does not beat by the paired difference over seeds (95% interval)."""
    best: dict = {}
    for size in sorted({size for _, size in summary}):
        regimes = [r for (r, s) in summary if s == size]
        top = max(regimes, key=lambda r: summary[(r, size)]["mean"])
        level = [r for r in regimes if r != top and compared(summary, top, r, size).outcome != "beats"]
        best[size] = f"tie: {', '.join([top, *level])}" if level else top
    return best


def drops(summary: dict, regime: str) -> list[tuple[int, int]]:
    """Each pair of consecutive sizes between which ``regime``'s mean dev accuracy falls: a
    learning curve that goes down with more data asks why (its lr, its steps, its seeds)."""
    sizes = sorted(size for (name, size) in summary if name == regime)
    return [(a, b) for a, b in zip(sizes, sizes[1:]) if summary[(regime, b)]["mean"] < summary[(regime, a)]["mean"]]


def recheck_at_lr(encoder: nn.Module, pool: datasets.Dataset, dev: datasets.Dataset, sizes, seeds, profile=None,
                  regime: str = "lora", factor: float = 4.0, min_examples: int = 0, epochs: int | None = None,
                  equal_steps: bool = False) -> dict:
    """``regime`` again at ``sizes`` (where its curve fell by more than the seeds' spread) with the
    same subsets, seeds and steps (pass the curve's ``equal_steps``), at ``factor`` times its lr:
    ``summarize`` of those runs, for ``fall_line`` to read."""
    results, _ = learning_curve(encoder, pool, dev, sizes, seeds, profile, min_examples=min_examples,
                                regimes=(regime,), epochs=epochs, lr_factor=factor, equal_steps=equal_steps)
    return summarize(results)


def within_spread(summary: dict, regime: str, sizes: tuple) -> bool:
    """Is ``regime``'s fall between ``sizes`` no larger than the seeds' spread (the larger
    standard deviation of the two)? Then seed variance explains it and no rerun is needed."""
    small, large = (summary[(regime, size)] for size in sizes)
    return small["mean"] - large["mean"] <= max(small["std"], large["std"])


def fall_line(summary: dict, again: dict | None, regime: str, sizes: tuple, factor: float = 4.0) -> str:
    """What explains ``regime``'s fall between ``sizes``: the seeds' spread (``within_spread``;
    ``again`` may then be ``None``), or else what ``recheck_at_lr`` found at ``factor`` times the
    lr. The lr explains the fall only if the rerun rises between the sizes *and* beats the
    original at the larger one: a rerun that collapses at both sizes explains nothing."""
    small, large = sizes
    first, second = summary[(regime, small)], summary[(regime, large)]
    line = (f"{regime} falls from {first['mean']:.3f} ± {first['std']:.3f} at {small} examples to {second['mean']:.3f} "
            f"± {second['std']:.3f} at {large} ({_steps_text(first['steps'])} and {_steps_text(second['steps'])} steps)")
    if within_spread(summary, regime, sizes):
        return line + ": no larger than the seeds' spread, so seed variance explains it, not the lr or the steps"
    if again is None:
        raise ValueError(f"{regime}'s fall between {small} and {large} is larger than the seeds' spread: "
                         "pass what recheck_at_lr found there.")
    low, high = again[(regime, small)]["mean"], again[(regime, large)]["mean"]
    fixed = high >= low and high > second["mean"]
    why = "too small for so few steps" if factor > 1 else "too large for these steps"
    return (line + f", more than the seeds' spread. At {factor:g}x its lr: {low:.3f} and {high:.3f}, so the fall "
            + (f"goes away: the lr, {why}, explains it" if fixed else "stays: the lr does not explain it"))


def crossover(summary: dict, low: str = "frozen", high: str = "finetune") -> int | None:
    """The smallest size from which ``high`` beats ``low`` at every larger size too, each by the
    paired difference over seeds with a 95% interval above zero (``None`` if it never does: a
    gap inside the seeds' noise is a tie, not a crossover)."""
    sizes = sorted({size for (regime, size) in summary if regime in (low, high)})
    winning = [compared(summary, high, low, s).outcome == "beats" for s in sizes]
    for i, size in enumerate(sizes):
        if all(winning[i:]):
            return size
    return None


def plot_learning_curve(summary: dict, ax=None):
    """Mean dev accuracy against labelled-set size (log scale), one line per regime, with a
    band of one standard deviation over seeds."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for regime in REGIMES:
        points = sorted((size, s) for (r, size), s in summary.items() if r == regime)
        if not points:
            continue
        sizes = [p[0] for p in points]
        mean = torch.tensor([p[1]["mean"] for p in points])
        std = torch.tensor([p[1]["std"] for p in points])
        ax.plot(sizes, mean, marker="o", label=regime)
        ax.fill_between(sizes, mean - std, mean + std, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("labelled training examples (log scale)")
    ax.set_ylabel("dev accuracy")
    ax.set_title("Which regime wins depends on how much labelled data there is")
    ax.legend()
    ax.grid(True, alpha=0.3)
    return ax


def regime_table(results) -> Table:
    """The side-by-side table: accuracy, trainable parameters, time per epoch, peak memory
    and bytes to store per task, one row per regime."""
    from .costs import MIB, format_bytes

    rows = [[r.regime, r.train_size, r.epochs, r.accuracy, r.trainable, r.seconds_per_epoch,
             f"{r.peak_memory_bytes / MIB:,.0f}", format_bytes(r.bytes_per_task)] for r in results]
    return Table(["regime", "examples", "epochs", "accuracy", "trainable", "s/epoch", "peak MiB", "stored/task"],
                 rows, formats={"accuracy": "{:.3f}", "s/epoch": "{:.3f}"})


def budget_table(sizes, min_examples: int, epochs: int, batch_size: int | None = None, profile=None) -> Table:
    """For each labelled-set size: the epochs a run trains (at least ``epochs``, and enough to
    see ``min_examples``) and the optimiser steps that makes in batches of ``batch_size``
    (default: ``profile``'s ``regime_batch_size``)."""
    profile = config.get_profile(profile)
    batch_size = batch_size or profile.regime_batch_size
    rows = []
    for size in sorted(sizes):
        n = epochs_for(size, min_examples, epochs)
        steps = steps_for(size, n, batch_size)
        rows.append([size, n, steps, *(f"{lr:g}" for lr in budget_lrs(profile, steps).values())])
    return Table(["examples", "epochs", "optimiser steps", *(f"{r} lr" for r in LR_FIELDS)], rows)


REGIME_LABELS = {"frozen": "frozen head", "lora": "LoRA", "finetune": "full fine-tuning"}


def accuracy_figures(summary: dict, size: int) -> list[tuple]:
    """Headline figures ``(name, measured, published, unit)``: each regime's mean SST-2 dev
    accuracy x100 at ``size`` labelled examples (no paper publishes these)."""
    return [(f"{REGIME_LABELS[r]}, {size} examples", 100 * summary[(r, size)]["mean"], None,
             f"SST-2 dev accuracy x100, mean of {summary[(r, size)]['n']} seeds") for r in REGIMES]


def learning_curve_table(summary: dict) -> Table:
    """Mean ± standard deviation over seeds of each regime at each size, and the best regime."""
    best = best_regime_by_size(summary)
    regimes = [r for r in REGIMES if any(key[0] == r for key in summary)]
    def steps(size):  # every run's optimiser steps at this size, regime by regime where they differ
        taken = {r: summary[(r, size)].get("steps", ()) for r in regimes}
        values = set(taken.values())
        return _steps_text(next(iter(values))) if len(values) == 1 else \
            ", ".join(f"{r} {_steps_text(v)}" for r, v in taken.items())

    rows = [[size] + [f"{summary[(r, size)]['mean']:.3f} ± {summary[(r, size)]['std']:.3f}" for r in regimes]
            + [best[size], steps(size)] for size in sorted(best)]
    seeds = {stats["n"] for stats in summary.values()}
    return Table(["examples", *regimes, "best", "steps (every run)"], rows,
                 notes=[f"dev accuracy, mean ± standard deviation over {'/'.join(map(str, sorted(seeds)))} seeds",
                        "best: the highest mean, or a tie with every regime it does not beat by the paired difference "
                        "over the same seeds and subsets (95% interval)"])


# ----------------------------------------------------------------------------- tagging


def train_lora_tagger(encoder: nn.Module, train: datasets.Dataset, profile=None, num_labels: int = 9,
                      seed: int = 0, epochs: int | None = None) -> heads.TaskModel:
    """A LoRA token tagger (``TokenTagger`` head) trained on tokenised CoNLL-2003 rows, on a
    copy of ``encoder``: the second task of the lesson's one-backbone server."""
    profile = config.get_profile(profile)
    torch.manual_seed(seed)
    model = lora.lora_task_model(copy.deepcopy(encoder), heads.TokenTagger(encoder.config.hidden_size, num_labels),
                                 rank=profile.lora_rank)
    settings = training.TrainConfig(lr=profile.lora_lr, head_lr=profile.adapter_head_lr,
                                    batch_size=profile.regime_batch_size, seed=seed,
                                    epochs=epochs or epochs_for(len(train), profile.learning_curve_min_examples,
                                                                profile.epochs), progress=False)
    training.train(model, train, settings)
    return model.eval()


def _tags(logits, labels, names):
    keep = labels != heads.IGNORE_INDEX
    return [names[i] for i in logits[keep].argmax(-1).tolist()], [names[i] for i in labels[keep].tolist()]


def entity_f1_fraction(model, data: datasets.Dataset, names=None) -> float:
    """Entity-level F1 (seqeval), between 0 and 1, of a token tagger on tokenised CoNLL-2003
    rows (``readout.entity_f1_x100`` gives the papers' x100 scale from tag lists)."""
    from seqeval.metrics import f1_score

    from .data import CONLL_LABELS

    names = names or CONLL_LABELS
    logits, labels = training.predict(model, data)
    pairs = [_tags(lg, lb, names) for lg, lb in zip(logits, labels)]
    return f1_score([gold for _, gold in pairs], [predicted for predicted, _ in pairs])


def tagging_table(tagged: list[tuple[str, str]], gold: list[str]) -> Table:
    """One row per word: the predicted tag beside the gold one (``tagged`` as ``tag_words`` gives)."""
    if len(tagged) != len(gold):
        raise ValueError(f"{len(tagged)} tagged words for {len(gold)} gold tags: pass the gold tags of the same sentence.")
    rows = [[word, predicted, tag, "" if predicted == tag else "✗"] for (word, predicted), tag in zip(tagged, gold)]
    right = sum(predicted == tag for (_, predicted), tag in zip(tagged, gold))
    return Table(["word", "predicted", "gold", "wrong"], rows, notes=[f"{right} of {len(gold)} words tagged as the gold"])


@torch.inference_mode()
def tag_words(model, tokenizer, words: list[str], names=None) -> list[tuple[str, str]]:
    """(word, predicted tag) for one pre-split sentence, read on each word's first subtoken."""
    from .data import CONLL_LABELS

    names = names or CONLL_LABELS
    encoded = heads.tokenize_for_tagging(tokenizer, [words], [[0] * len(words)])
    inputs = {k: torch.tensor(v) for k, v in encoded.items() if k != "labels"}
    logits = model(**inputs)["logits"][0]
    predicted, _ = _tags(logits, torch.tensor(encoded["labels"][0]), names)
    return list(zip(words, predicted))
