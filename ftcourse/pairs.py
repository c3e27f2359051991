"""The pair head, trained: a cross-encoder, and what comparing n sentences costs with it.

A cross-encoder packs ``[CLS] a [SEP] b [SEP]`` into one input and reads a similarity score off
[CLS] (``heads.PairClassifier`` with one output: regression on STS-B's scores). Every token
of ``a`` attends to every token of ``b``, which is why it reads a pair well, and why nothing it
computes can be reused: comparing ``n`` sentences with each other takes ``n (n - 1) / 2`` encoder
passes. A bi-encoder (Sentence-BERT, lesson 4) encodes each sentence once, ``n`` passes, and
compares the vectors with a cosine. That cost is the reason the Sentence-BERT paper gives for
bi-encoders; ``pairwise_cost`` measures it.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import datasets
import torch
from tqdm.auto import tqdm
from torch import nn

from . import config, data, heads, similarity, training
from .report import Table


def tokenize_pairs(pairs: datasets.Dataset, tokenizer, max_length: int,
                   score_range=data.STSB_SCORE_RANGE) -> datasets.Dataset:
    """STS-B pairs as ``[CLS] sentence1 [SEP] sentence2 [SEP]``, the score rescaled from
    ``score_range`` (STS-B's 0-5) to 0..1 as ``labels``, the range a bi-encoder's cosine is
    trained to (``similarity.train_siamese``): a new head regressing 0..5 would spend its first
    hundreds of steps only moving its bias towards 2.5."""
    low, high = score_range
    scaled = pairs.map(lambda row: {"score": (row["score"] - low) / (high - low)})
    return data.tokenize(scaled, tokenizer, max_length, text="sentence1", pair="sentence2", label="score")


def cross_encoder(encoder: nn.Module, seed: int = 0) -> heads.TaskModel:
    """A one-output pair head on a copy of ``encoder``, every weight trainable."""
    torch.manual_seed(seed)
    return heads.TaskModel(copy.deepcopy(encoder), heads.PairClassifier(encoder.config.hidden_size, num_labels=1))


def train_cross_encoder(encoder: nn.Module, train: datasets.Dataset, profile=None, seed: int = 0,
                        epochs: int | None = None, lr: float | None = None, pad_token_id: int = 0,
                        progress: bool = True):
    """``cross_encoder(encoder)`` fine-tuned on tokenised pairs by the recipe, with lesson 4's
    siamese budget by default (the profile's siamese epochs and batch size, its fine-tuning
    lr), so the two architectures get the same steps. The new one-output head trains at the
    profile's head lr, as every new head in the course does. ``progress``: the recipe's bar over
    optimiser steps, with its estimate of the time left. Returns ``(model, history)``."""
    profile = config.get_profile(profile)
    model = cross_encoder(encoder, seed)
    settings = training.TrainConfig(lr=lr or profile.finetune_lr, head_lr=profile.head_lr,
                                    epochs=epochs or profile.siamese_epochs,
                                    batch_size=profile.siamese_batch_size, seed=seed, progress=progress)
    return model, training.train(model, train, settings, pad_token_id=pad_token_id)


def choose_lr(encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, lrs, profile=None,
              epochs: int = 1, pad_token_id: int = 0, extensions: int = 2, step: float = 4.0,
              trained: dict | None = None) -> tuple[float, dict]:
    """The lr of ``lrs`` whose cross-encoder, trained ``epochs`` on ``train``, ranks the pairs of
    ``validation`` (carved from the training split, never the reported one) best. When the best
    sits at an end of the grid, the grid grows one ``step`` that way, up to ``extensions`` times
    (``experiments.grid.search``, the search ``experiments.choose_lr`` runs too). Returns
    ``(lr, {lr: validation Spearman x100})``; ties go to the first tried. ``trained``: a dict that
    receives each model, keyed ``(lr, epochs)``, so the chosen one need not train again."""
    from .experiments import grid

    data.require_validation(validation, "pairs.choose_lr")

    def score(lr):
        model, _ = train_cross_encoder(encoder, train, profile, epochs=epochs, lr=lr, pad_token_id=pad_token_id,
                                       progress=False)
        if trained is not None:
            trained[lr, epochs] = model
        return spearman_x100(model, validation, pad_token_id)

    found = grid.search(score, lrs, step, extensions, progress=lambda values: tqdm(values, desc="cross-encoder lr sweep"))
    return found.best, dict(sorted(found.scores.items()))


def choose_epochs(encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, lr: float,
                  candidates=(1, 2, 3), profile=None, pad_token_id: int = 0, known: dict | None = None,
                  trained: dict | None = None) -> tuple[int, dict]:
    """The number of epochs, of ``candidates``, whose cross-encoder at ``lr`` ranks ``validation``'s
    pairs best: the stopping rule, chosen for this architecture as lesson 4 chose the
    bi-encoder's. ``known``: ``{epochs: score}`` already measured (``choose_lr``'s own run).
    Returns ``(epochs, {epochs: validation Spearman x100})``; ties go to the fewest. ``trained``:
    as ``choose_lr``'s."""
    data.require_validation(validation, "pairs.choose_epochs")
    scores = dict(known or {})
    for count in tqdm([c for c in candidates if c not in scores], desc="cross-encoder epochs"):
        model, _ = train_cross_encoder(encoder, train, profile, epochs=count, lr=lr, pad_token_id=pad_token_id,
                                       progress=False)
        if trained is not None:
            trained[lr, count] = model
        scores[count] = spearman_x100(model, validation, pad_token_id)
    scores = dict(sorted(scores.items()))
    return max(scores, key=scores.get), scores


@dataclass(frozen=True)
class CrossEncoderChoice:
    """A cross-encoder's rate and stopping point, both chosen on a carved validation part, and
    the model the chooser trained at that choice (on the chooser's training pairs)."""

    lr: float
    epochs: int
    lr_scores: dict  # lr -> validation Spearman x100, at ``lr_epochs``
    epoch_scores: dict  # epochs -> validation Spearman x100, at ``lr``
    lr_epochs: int = 1
    model: nn.Module | None = field(default=None, repr=False, compare=False)

    def line(self, name: str = "cross-encoder") -> str:
        from .experiments import grid

        return (f"{name}, validation Spearman x100 by lr ({self.lr_epochs} epoch{'s' if self.lr_epochs > 1 else ''}): "
                + grid.line(self.lr_scores, self.lr, "{:.1f}")
                + ("" if len(self.epoch_scores) < 2 else "; by epochs at that lr: "
                   + grid.line(self.epoch_scores, self.epochs, "{:.1f}")))


def choose_cross_encoder(encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, lrs,
                         profile=None, epochs=(1,), pad_token_id: int = 0) -> CrossEncoderChoice:
    """The rate (``choose_lr``, at the fewest of ``epochs``), then the number of ``epochs`` at that
    rate (``choose_epochs``), each on ``validation``. The choice keeps the model trained at it, so a
    run on the same ``train`` at the chosen budget is that model, not a second training."""
    first, trained = min(epochs), {}
    lr, lr_scores = choose_lr(encoder, train, validation, lrs, profile, epochs=first, pad_token_id=pad_token_id,
                              trained=trained)
    count, epoch_scores = choose_epochs(encoder, train, validation, lr, epochs, profile, pad_token_id,
                                        known={first: lr_scores[lr]}, trained=trained)
    return CrossEncoderChoice(lr, count, lr_scores, epoch_scores, first, model=trained[lr, count])


def zero_shot_x100(encoder: nn.Module, tokenizer, pairs: datasets.Dataset) -> float:
    """The untrained encoder's Spearman x100 on STS-B-style ``pairs`` (untokenised), from the cosine
    of its mean-pooled last layer: the floor a supervised run on the same encoder must clear."""
    scores = similarity.evaluate_encoder(encoder, tokenizer, pairs["sentence1"], pairs["sentence2"], pairs["score"],
                                         poolings=("mean",))
    return next(iter(scores.values()))


def both_heads(role: str, encoder: nn.Module, tokenizer, train, held_out, scored: dict, profile, recipe, lrs) -> dict:
    """Both heads from the ``role`` model ``encoder``, on the same untokenised STS-B rows ``train`` and
    budget (``recipe``'s epochs and batch): a cross-encoder, its lr chosen on ``held_out`` (carved from
    the training pairs, never a reported split), and a siamese bi-encoder (``recipe``). Each is scored
    on every split of ``scored`` (``{name: rows}``), beside the untrained encoder's mean-pooled cosine
    there, the floor a supervised run on that encoder must clear. Returns ``{"cross", "bi",
    "zero_shot"}`` (each ``{split: Spearman x100}``), ``"choice"``, and the two models
    (``"cross_model"``, ``"bi_model"``)."""
    from . import models

    pad = tokenizer.pad_token_id
    train_pairs, held_pairs = (tokenize_pairs(part, tokenizer, profile.max_length) for part in (train, held_out))
    choice = choose_cross_encoder(encoder, train_pairs, held_pairs, lrs, profile, (recipe.epochs,), pad)
    cross = choice.model  # trained on train_pairs at the chosen lr and recipe's epochs: the run itself
    bi, _ = similarity.cached_siamese(models.model_source(role, profile), train, recipe)
    return {"choice": choice, "cross_model": cross, "bi_model": bi,
            "cross": {split: spearman_x100(cross, tokenize_pairs(rows, tokenizer, profile.max_length), pad)
                      for split, rows in scored.items()},
            "bi": {split: similarity.evaluate_sentence_model(bi, rows["sentence1"], rows["sentence2"], rows["score"])
                   for split, rows in scored.items()},
            "zero_shot": {split: zero_shot_x100(encoder, tokenizer, rows) for split, rows in scored.items()}}


def more_budget(encoder: nn.Module, tokenizer, train, validation, lr: float, profile, epochs=(2, 4)) -> dict:
    """``{epochs: validation Spearman x100}`` of the cross-encoder from ``encoder`` at ``lr``, trained on
    every pair of ``train`` (untokenised STS-B rows) for each of ``epochs``: whether a failed
    cross-encoder was held back by its budget (the pairs and epochs it was given) or by its start.
    ``validation``: carved from the training pairs, as the chooser's."""
    data.require_validation(validation, "pairs.more_budget")
    train_pairs, held_pairs = (tokenize_pairs(part, tokenizer, profile.max_length) for part in (train, validation))
    return choose_epochs(encoder, train_pairs, held_pairs, lr, epochs, profile, tokenizer.pad_token_id)[1]


def below_floor(cross: float, floor: float | None) -> bool:
    """Is a trained cross-encoder at or below ``floor``, its own encoder's untrained mean cosine on
    the same split? Such a run learned less from the labels than the encoder knew before them: a
    failed run, which no verdict about the architecture may read. A NaN score (Spearman of a model
    that predicts one constant) is below any floor. No floor given: never."""
    return floor is not None and not cross > floor


def budget_verdict(scores: dict, at_budget: float, floor: float, pairs_given: int, pairs_all: int,
                   epochs_given: int) -> str:
    """Whether more budget lifts a cross-encoder above its encoder's floor (all on validation):
    ``scores`` is ``more_budget``'s, ``at_budget`` the chosen run's score with ``pairs_given`` pairs
    and ``epochs_given`` epochs, ``floor`` the untrained mean cosine. The budget is the cause when a
    bigger one clears the floor that the given one did not."""
    if not below_floor(at_budget, floor):
        answer = "not needed: the given budget already clears it"
    elif any(not below_floor(score, floor) for score in scores.values()):
        answer = "yes: the budget held it back"
    else:
        answer = "no: the budget is not what holds it back"
    runs = ", ".join(f"{s:.1f} ({e} epoch{'s' if e > 1 else ''})" for e, s in sorted(scores.items()))
    return (f"validation Spearman x100: {at_budget:.1f} with {pairs_given:,} pairs x {epochs_given} epochs; {runs} with "
            f"all {pairs_all:,}; the untrained mean cosine {floor:.1f}; more pairs and epochs lift the cross-encoder above "
            f"it: {answer}")


#: How each starting encoder is named in the pair lesson's table and verdicts.
ENCODER_NAMES = {"raw_encoder": "the raw encoder (MLM only)", "encoder": "the adapted encoder (trained as a bi-encoder)"}


def comparison_table(by_encoder: dict, train_pairs: int, epochs: int, published: dict | None = None,
                     split: str = "test") -> Table:
    """Cross- against bi-encoder on STS-B ``split`` from each starting encoder (``both_heads``'
    results by role), the same budget for all four runs, each encoder's untrained mean cosine beside
    them (its floor), then the paper's Table 2 row."""
    rows = [[f"from {ENCODER_NAMES.get(role, role)}", train_pairs, epochs, result["cross"][split], result["bi"][split],
             result["bi"][split] - result["cross"][split], result["zero_shot"][split]]
            for role, result in by_encoder.items()]
    if published:
        rows.append(["paper, Table 2 (bert-base, all pairs, 10 seeds)", None, None, published["cross_encoder"],
                     published["bi_encoder"], published["bi_encoder"] - published["cross_encoder"], None])
    return Table([f"STS-B {split}, Spearman x100", "training pairs", "epochs", "cross-encoder", "bi-encoder",
                  "bi - cross", "untrained, mean cosine"], rows,
                 formats={c: "{:.2f}" for c in ("cross-encoder", "bi-encoder", "bi - cross", "untrained, mean cosine")})


def predicted_scores(model, pairs: datasets.Dataset, pad_token_id: int = 0) -> torch.Tensor:
    logits, _ = training.predict(model, pairs, pad_token_id=pad_token_id)
    return torch.stack(logits).squeeze(-1)


def spearman_x100(model, pairs: datasets.Dataset, pad_token_id: int = 0) -> float:
    """Spearman x100 between the model's scores and the gold ones, as the papers report."""
    return similarity.spearman(predicted_scores(model, pairs, pad_token_id).numpy(), list(pairs["labels"]))


def pairwise_cost(cross_model, bi_model, tokenizer, sentences: list[str], max_length: int) -> dict:
    """Compare every sentence of ``sentences`` with every other, both ways, and time it:

    - the cross-encoder scores each of the ``n (n - 1) / 2`` pairs in an encoder pass of its own;
    - the bi-encoder (a ``SentenceTransformer``) encodes the ``n`` sentences once, then one
      matrix product gives every cosine.

    Returns the passes, seconds and seconds per pass of each."""
    n = len(sentences)
    if n < 2:
        raise ValueError(f"Comparing sentences needs at least 2, got {n}.")
    first, second = zip(*[(sentences[i], sentences[j]) for i in range(n) for j in range(i + 1, n)])
    packed = tokenize_pairs(datasets.Dataset.from_dict({"sentence1": list(first), "sentence2": list(second),
                                                       "score": [0.0] * len(first)}), tokenizer, max_length)
    start = time.perf_counter()
    predicted_scores(cross_model, packed.remove_columns(["labels"]), tokenizer.pad_token_id)
    cross_seconds = time.perf_counter() - start
    start = time.perf_counter()
    similarity.cosine_matrix(bi_model.encode(sentences))
    bi_seconds = time.perf_counter() - start
    return {"sentences": n, "cross_passes": len(first), "bi_passes": n, "cross_seconds": cross_seconds,
            "bi_seconds": bi_seconds}


def extrapolate(cost: dict, sentences: int) -> dict:
    """The same work for ``sentences`` sentences, from the measured time per pass (the cosine
    matrix's own share is ignored: it is one product)."""
    pairs = sentences * (sentences - 1) // 2
    return {"sentences": sentences, "cross_passes": pairs, "bi_passes": sentences,
            "cross_seconds": cost["cross_seconds"] / cost["cross_passes"] * pairs,
            "bi_seconds": cost["bi_seconds"] / cost["bi_passes"] * sentences}


def _duration(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds:,.1f} s"


def cost_table(measured: dict, extrapolated: dict) -> Table:
    rows = []
    for label, cost, how in ((f"{measured['sentences']:,} sentences", measured, "measured"),
                             (f"{extrapolated['sentences']:,} sentences", extrapolated, "extrapolated per pass")):
        rows.append([label, how, cost["cross_passes"], _duration(cost["cross_seconds"]), cost["bi_passes"],
                     _duration(cost["bi_seconds"]), cost["cross_seconds"] / cost["bi_seconds"]])
    return Table(["every pair of", "how", "cross passes", "cross time", "bi passes", "bi time", "cross / bi"], rows,
                 formats={"cross / bi": "{:,.0f}x"},
                 notes=["cross: one encoder pass per pair; bi: one per sentence, then a single cosine matrix"])


def growth(cost: dict, half: dict) -> dict:
    """How each side's time grew from ``half`` (``n / 2`` sentences) to ``cost`` (``n``): the
    cross-encoder's passes grow about 4x when the sentences double, the bi-encoder's 2x."""
    return {side: cost[f"{side}_seconds"] / max(half[f"{side}_seconds"], 1e-9) for side in ("cross", "bi")} | \
        {f"{side}_passes": cost[f"{side}_passes"] / half[f"{side}_passes"] for side in ("cross", "bi")}


def verdicts(cross: float, bi: float, cost: dict, extrapolated: dict, published: dict, paper_cost: dict,
             paper_std: dict | None = None, half: dict | None = None, floor: float | None = None) -> list[str]:
    """The Sentence-BERT paper's two claims about cross- and bi-encoders, read off the runs:
    trained on STS-B, the two are close (Table 2: within half a point, about one seed spread);
    comparing every pair of ``n`` sentences costs the cross-encoder a time that grows with the
    pairs, ``n (n - 1) / 2``, where the bi-encoder's grows with ``n``: measured by timing both at
    ``n`` (``cost``) and ``n / 2`` (``half``), so the claim fails if the cross-encoder's time does
    not grow faster than linearly. The extrapolation to the paper's sentences is arithmetic on the
    measured time per pass, shown beside the paper's hours, not a verdict.

    ``floor``: the same encoder's untrained mean-pooled cosine on the same split. A cross-encoder at
    or below it is a failed run, which says nothing about the architecture: the closeness claim is
    then NOT TESTED, rather than decided by it."""
    paper_gap = published["bi_encoder"] - published["cross_encoder"]
    close = abs(bi - cross) <= abs(paper_gap) + sum((paper_std or {}).values()) + 1.0
    ratio = extrapolated["cross_seconds"] / extrapolated["bi_seconds"]
    if below_floor(cross, floor):
        closeness = (f"NOT TESTED (the cross-encoder sits below the same encoder's untrained mean cosine, "
                     f"{floor:.2f}: a failed run, not evidence about the architecture)")
    else:
        closeness = ("agrees" if close else "DISAGREES" + f" ({'the cross-encoder' if cross > bi else 'the bi-encoder'} "
                                                          f"leads by {abs(bi - cross):.1f} points)")
    lines = [
        f"trained on STS-B, STS-B test: cross-encoder {cross:.2f}, bi-encoder {bi:.2f} ({bi - cross:+.2f}); the "
        f"paper's Table 2 (bert-base): {published['cross_encoder']:.2f} and {published['bi_encoder']:.2f} "
        f"({paper_gap:+.2f}); the two are close: {closeness}",
        f"every pair of {extrapolated['sentences']:,} sentences, extrapolated from the measured time per pass: "
        f"{extrapolated['cross_passes']:,} cross-encoder passes against {extrapolated['bi_passes']:,}, "
        f"{_duration(extrapolated['cross_seconds'])} against {_duration(extrapolated['bi_seconds'])} here "
        f"({ratio:,.0f}x; the paper: about {paper_cost['cross_encoder_hours']} hours against "
        f"{paper_cost['bi_encoder_seconds']} seconds on a GPU)",
    ]
    if half is not None:
        grew = growth(cost, half)
        quadratic = grew["cross"] >= 3 and grew["cross"] > 1.5 * grew["bi"]
        lines.append(f"from {half['sentences']} to {cost['sentences']} sentences the cross-encoder's time grew "
                     f"{grew['cross']:.1f}x (its passes {grew['cross_passes']:.1f}x), the bi-encoder's "
                     f"{grew['bi']:.1f}x (its passes {grew['bi_passes']:.1f}x): the cross-encoder's cost grows with the "
                     f"pairs, the bi-encoder's with the sentences: {'agrees' if quadratic else 'DISAGREES'}")
    return lines


def zero_shot_verdict(cross: float, zero_shot: float, split: str = "test", encoder: str | None = None) -> str:
    """Whether the trained cross-encoder beats the untrained encoder's mean-pooled cosine on the
    same split: a supervised run below its own encoder's zero-shot score has learned less from
    the labels than it had before them, and the notebook must say why."""
    beats = not below_floor(cross, zero_shot)
    return (f"the cross-encoder{' from ' + encoder if encoder else ''} ({cross:.2f}, STS-B {split}) against the same "
            f"encoder untrained, mean-pooled "
            f"cosine ({zero_shot:.2f}): {'above it' if beats else 'BELOW IT: the trained run learned less than the encoder knew'}")


def encoder_verdict(raw: tuple, adapted: tuple, floors: tuple | None = None) -> str:
    """Whether the raw encoder explains the cross-encoder's deficit: ``raw`` and ``adapted`` are
    ``(cross, bi)`` Spearman x100 from the raw encoder and from the adapted one. The explanation
    holds when the bi-encoder's lead shrinks by more than half once both start from the
    better-pretrained encoder (which, trained as a bi-encoder, still favours the bi-encoder).
    ``floors``: each encoder's untrained mean cosine, ``(raw, adapted)``; a gap measured from a
    cross-encoder at or below its floor is a failed run's, so the verdict is then NOT TESTED."""
    raw_gap, adapted_gap = raw[1] - raw[0], adapted[1] - adapted[0]
    shrinks = raw_gap > 0 and adapted_gap < raw_gap / 2
    failed = [name for name, (cross, _), floor in zip(("raw", "adapted"), (raw, adapted), floors or (None, None))
              if below_floor(cross, floor)]
    if failed:
        answer = (f"NOT TESTED (the {failed[0]} encoder's cross-encoder sits below that encoder's untrained mean cosine)"
                  if len(failed) == 1 else
                  "NOT TESTED (both cross-encoders sit below their encoders' untrained mean cosines)")
    else:
        answer = "yes" if shrinks else "no"
    return (f"the bi-encoder's lead, STS-B test: {raw_gap:+.2f} points from the raw encoder, {adapted_gap:+.2f} from "
            f"the adapted one; a better-pretrained encoder closes most of the gap: {answer}")
