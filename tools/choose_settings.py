"""Re-choose the offline profile's measured settings on validation parts, never on a reported split.

Each setting of ``ftcourse/config.py`` that was picked by a measurement is swept again here on a
part carved from the training split (``data.carve_validation``, seed 0), with the training
subset drawn from the rest. The split the lesson reports (SST-2's GLUE dev set, CoNLL-2003's dev
set, STS-B's test and dev sets) is never read. ``config.py``'s comment beside each setting quotes
these figures. A learning rate is the best-scoring one; a number of epochs is the fewest within one
standard error of the best (``choose``), since more of them cost time.

    python -m tools.choose_settings                  # every sweep (11 minutes on 2 cores)
    python -m tools.choose_settings lora_lr epochs   # some of them

Sweeps:

- ``epochs``: lesson 1's fine-tuning, SST-2, 2,000 sentences, lr ``finetune_lr``, 1 to 3 epochs;
- ``lora_lr``: LoRA r=8, SST-2, 1,000 sentences, 2 epochs of batch 16;
- ``exercise_lora_lr``: the exercise's LoRA at the exercise's budget (1 epoch of batch 32);
- ``exercise_lrs``: the exercise's frozen head and full fine-tuning at that budget;
- ``readout_lr``: lesson 2's BiLSTM on frozen CoNLL-2003 features, ``readout_epochs`` epochs;
- ``adapter_head_lr``: lesson 3's LoRA tagger, CoNLL-2003, 2,000 sentences, 2 epochs;
- ``siamese_epochs``: lesson 4's siamese training of the raw encoder, both poolings, 3 and 4 epochs;
- ``learning_curve_lrs``: lesson 3's three regimes at each step budget of its learning curve.
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import torch

import ftcourse
from ftcourse import data, heads, models, readout, regimes, similarity, training

SST2_VALIDATION = 872  # as many as the GLUE dev set it stands in for
CONLL_VALIDATION = 1000
STSB_VALIDATION = 300  # lesson 4b's carve


def choose(scores: dict, standard_error: float | None = None):
    """The best-scoring value (ties: the first tried). With ``standard_error``, for a setting whose
    cost grows with its value (epochs), tried cheapest first: the cheapest within one standard
    error of the best, the one-standard-error rule (Hastie, Tibshirani & Friedman, *The Elements of
    Statistical Learning*, section 7.10): a difference the validation part cannot resolve buys no time."""
    best = max(scores, key=scores.get)
    if standard_error is None:
        return best
    return next(value for value, score in scores.items() if score >= scores[best] - standard_error)


def accuracy_error(accuracy: float, n: int) -> float:
    return math.sqrt(accuracy * (1 - accuracy) / n)


def spearman_error_x100(rho_x100: float, n: int) -> float:
    """The standard error of a correlation of ``n`` pairs (Fisher's approximation), x100."""
    rho = rho_x100 / 100
    return 100 * (1 - rho**2) / math.sqrt(n - 3)


def _report(name: str, scores: dict, unit: str, standard_error: float | None = None) -> None:
    rule = "" if standard_error is None else f", one-standard-error rule, SE {standard_error:.3f}"
    print(f"{name}: " + ", ".join(f"{value:g} {score:.3f}" for value, score in scores.items())
          + f" ({unit}, validation{rule}) -> {choose(scores, standard_error):g}", flush=True)


def sst2_parts(profile, tokenizer, size: int):
    rest, held = data.carve_validation(data.load_sst2(profile, full=True)["train"], SST2_VALIDATION)
    data.require_validation(held, "tools.choose_settings")
    return (regimes.tokenize_sentences(data.subsample(rest, size), tokenizer, profile.max_length),
            regimes.tokenize_sentences(held, tokenizer, profile.max_length))


def conll_parts(profile, size: int):
    rest, held = data.carve_validation(data.load_conll2003(profile, full=True)["train"], CONLL_VALIDATION)
    data.require_validation(held, "tools.choose_settings")
    return data.subsample(rest, size), held


def epochs(profile, tokenizer, encoder) -> None:
    train, validation = sst2_parts(profile, tokenizer, 2000)
    scores = {}
    for count in (1, 2, 3):
        ftcourse.seed_everything(0)
        model = heads.set_regime(heads.TaskModel(copy.deepcopy(encoder), heads.SentenceClassifier(encoder.config.hidden_size, 2)),
                                 "finetune")
        recipe = training.TrainConfig(lr=profile.finetune_lr, epochs=count, batch_size=profile.batch_size, progress=False)
        training.train(model, train, recipe, pad_token_id=tokenizer.pad_token_id)
        scores[count] = training.accuracy(*training.predict(model, validation, pad_token_id=tokenizer.pad_token_id))["accuracy"]
    _report("epochs (SST-2, 2,000 sentences, full fine-tuning)", scores, "accuracy",
            accuracy_error(max(scores.values()), validation.num_rows))


def lora_lr(profile, tokenizer, encoder) -> None:
    train, validation = sst2_parts(profile, tokenizer, 1000)
    scores = {lr: regimes.run_regime("lora", encoder, train, validation, profile.with_(lora_lr=lr), epochs=2).accuracy
              for lr in (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)}
    _report("lora_lr (SST-2, 1,000 sentences, 2 epochs)", scores, "accuracy")


def exercise_lora_lr(profile, tokenizer, encoder) -> None:
    """The exercise's LoRA (its own LoraConfig: r 8, alpha 8, dropout 0.1 on query and value) at the
    exercise's budget: 1 epoch of batch 32 on its training size, far fewer steps than lesson 3's."""
    from peft import LoraConfig, get_peft_model

    train, validation = sst2_parts(profile, tokenizer, profile.exercise_train_size)
    scores = {}
    for lr in (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2):
        torch.manual_seed(0)
        adapted = get_peft_model(copy.deepcopy(encoder), LoraConfig(r=8, lora_alpha=8, lora_dropout=0.1,
                                                                    target_modules=["query", "value"]))
        model = heads.TaskModel(adapted, heads.SentenceClassifier(encoder.config.hidden_size, 2))
        recipe = training.TrainConfig(lr=lr, head_lr=profile.head_lr, epochs=profile.exercise_epochs,
                                      batch_size=profile.batch_size, seed=0, progress=False)
        training.train(model, train, recipe, pad_token_id=tokenizer.pad_token_id)
        scores[lr] = training.accuracy(*training.predict(model, validation, pad_token_id=tokenizer.pad_token_id))["accuracy"]
    _report(f"exercise_lora_lr (SST-2, {train.num_rows:,} sentences, {profile.exercise_epochs} epoch of batch "
            f"{profile.batch_size})", scores, "accuracy")


def exercise_lrs(profile, tokenizer, encoder) -> None:
    """The exercise's frozen head and full fine-tuning at the exercise's budget (1 epoch of batch 32
    on its training size), each built as the solution builds it ([CLS] head, seed 0): the frozen
    head trains at its rate alone, fine-tuning's head at the profile's head lr."""
    train, validation = sst2_parts(profile, tokenizer, profile.exercise_train_size)
    grids = {"frozen": (1e-3, 3e-3, 1e-2, 3e-2, 1e-1), "finetune": (5e-5, 1e-4, 2e-4, 4e-4, 8e-4)}
    for regime, grid in grids.items():
        scores = {}
        for lr in grid:
            torch.manual_seed(0)
            model = heads.set_regime(heads.TaskModel(copy.deepcopy(encoder), heads.SentenceClassifier(
                encoder.config.hidden_size, 2)), regime)
            recipe = training.TrainConfig(lr=lr, head_lr=lr if regime == "frozen" else profile.head_lr,
                                          epochs=profile.exercise_epochs, batch_size=profile.batch_size, seed=0,
                                          progress=False)
            training.train(model, train, recipe, pad_token_id=tokenizer.pad_token_id)
            scores[lr] = training.accuracy(*training.predict(model, validation,
                                                             pad_token_id=tokenizer.pad_token_id))["accuracy"]
        _report(f"exercise_lrs {regime} (SST-2, {train.num_rows:,} sentences, {profile.exercise_epochs} epoch of "
                f"batch {profile.batch_size})", scores, "accuracy")


def readout_lr(profile, tokenizer, encoder) -> None:
    train, held = conll_parts(profile, profile.train_size("conll2003") or 2000)
    features = {split: readout.cached_features(encoder, tokenizer, part, f"choose-{split}", profile, progress=False,
                                               verbose=False) for split, part in (("train", train), ("validation", held))}
    scores = {}
    for lr in (1e-3, 3e-3, 1e-2, 3e-2):
        results = [readout.evaluate_readout(features["train"], features["validation"], name, profile, lr=lr).f1
                   for name in ("last", "second_to_last")]
        scores[lr] = sum(results) / len(results)
    _report("readout_lr (CoNLL-2003 BiLSTM, mean of last and second_to_last)", scores, "entity F1 x100")


def adapter_head_lr(profile, tokenizer, encoder) -> None:
    train, held = conll_parts(profile, 2000)
    train, held = (regimes.tokenize_tags(part, tokenizer, profile.max_length) for part in (train, held))
    scores = {}
    for lr in (1e-3, 1e-2):
        tagger = regimes.train_lora_tagger(encoder, train, profile.with_(adapter_head_lr=lr), epochs=2)
        scores[lr] = regimes.entity_f1_fraction(tagger, held)
    _report("adapter_head_lr (CoNLL-2003, 2,000 sentences, 2 epochs)", scores, "entity F1")


def siamese_epochs(profile, tokenizer, encoder) -> None:
    rest, held = data.carve_validation(data.load_stsb(profile)["train"], STSB_VALIDATION)
    data.require_validation(held, "tools.choose_settings")
    for pooling in similarity.POOLINGS:
        scores = {}
        for count in (3, 4):
            recipe = similarity.SiameseConfig(pooling=pooling, epochs=count, batch_size=profile.siamese_batch_size,
                                              lr=profile.finetune_lr, max_length=profile.max_length, seed=0, progress=False)
            start = time.perf_counter()
            model = similarity.train_siamese(models.model_source("raw_encoder", profile), rest, recipe)
            scores[count] = similarity.evaluate_sentence_model(model, held["sentence1"], held["sentence2"], held["score"])
            print(f"  {pooling} {count} epochs: {time.perf_counter() - start:.0f} s", flush=True)
        _report(f"siamese_epochs ({pooling} pooling, raw encoder, STS-B)", scores, "Spearman x100",
                spearman_error_x100(max(scores.values()), held.num_rows))


# Each grid reaches past its best on both sides at both budgets (a first pass stopped at 3e-3 for the
# frozen head and 1.6e-2 for LoRA, both at an edge, so those edges were widened).
CURVE_GRIDS = {"frozen": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1), "lora": (2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2),
               "finetune": (5e-5, 1e-4, 2e-4, 4e-4)}


def learning_curve_lrs(profile, tokenizer, encoder) -> None:
    """Lesson 3's curve gives every regime the same optimiser steps at a size: 32 for the small
    sets, 128 at the largest (``regimes.budget_table``). Each regime's lr is chosen at each of
    those budgets, on one epoch of ``steps x regime_batch_size`` sentences; the frozen head takes
    the same number of full-batch steps."""
    sizes, batch = profile.learning_curve_sizes, profile.regime_batch_size
    budgets = sorted({regimes.steps_for(size, regimes.epochs_for(size, profile.learning_curve_min_examples,
                                                                  profile.learning_curve_epochs or profile.epochs), batch)
                      for size in sizes})
    chosen = {}
    for steps in budgets:
        train, validation = sst2_parts(profile, tokenizer, steps * batch)
        features = [regimes.cached_features(encoder, part, f"choose-sst2-{name}", profile.frozen_pooling)[0]
                    for name, part in ((f"train-{train.num_rows}", train), ("validation", validation))]
        chosen[steps] = {}
        for regime, grid in CURVE_GRIDS.items():
            field = regimes.LR_FIELDS[regime]
            scores = {lr: regimes.run_regime(regime, encoder, train, validation, profile.with_(**{field: lr}), epochs=1,
                                             train_features=features[0], dev_features=features[1],
                                             probe_steps=steps).accuracy for lr in grid}
            _report(f"learning_curve_lrs[{steps}][{regime}] (SST-2, {train.num_rows:,} sentences, {steps} steps)",
                    scores, "accuracy")
            chosen[steps][regime] = choose(scores)
    print(f"learning_curve_lrs={chosen}", flush=True)


SWEEPS = {f.__name__: f for f in (epochs, lora_lr, exercise_lora_lr, exercise_lrs, readout_lr, adapter_head_lr, siamese_epochs,
                                  learning_curve_lrs)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.choose_settings", description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", metavar="SWEEP", help=f"some of {', '.join(SWEEPS)} (default: every one)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.sweeps if name not in SWEEPS]
    if unknown:
        parser.error(f"unknown sweep {', '.join(unknown)}; known: {', '.join(SWEEPS)}")
    profile = ftcourse.setup(verbose=False)
    tokenizer = models.load_tokenizer(profile=profile)
    encoder = models.load_encoder(profile, add_pooling_layer=False)
    torch.manual_seed(0)
    for name in args.sweeps or SWEEPS:
        start = time.perf_counter()
        SWEEPS[name](profile, tokenizer, encoder)
        print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
