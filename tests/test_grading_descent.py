"""The descent check (issue 38): a run passes only if its change of the trainable weights is a step
down the training loss on the grader's own examples. Calibrated here on honest runs (the course's
recipe, as the solution trains) and on planted noise, at the smoke and grading profiles; the test
prints both margins against ``verdicts.DESCENT_MIN_Z``."""

import copy

import pytest
import torch

from ftcourse import config, training
from ftcourse.course import evidence, verdicts

REGIMES = ("frozen", "finetune", "lora")
LORA = {"r": 8, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": ["query", "value"], "bias": "none"}


def _rates(profile) -> dict:
    return {"frozen": profile.exercise_frozen_lr, "finetune": profile.exercise_finetune_lr,
            "lora": profile.exercise_lora_lr}


def honest(ref, regime, seed=0, train=None, order=None):
    """A run as the solution makes it: the course's model for the regime, the exercise's recipe
    (``order``: another seed for the order the data is read in, the head staying ``seed``'s)."""
    profile = ref.profile
    lora = verdicts.lora_settings(LORA) if regime == "lora" else None
    start = ref.model(regime, lora)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in start.named_parameters():
            if evidence.is_new_parameter(name) and "lora_B" not in name:
                p.copy_(torch.randn_like(p) * 0.02)  # the seed's own head (and LoRA A)
    final = copy.deepcopy(start)
    rate = _rates(profile)[regime]
    recipe = training.TrainConfig(lr=rate, head_lr=rate if regime == "frozen" else profile.head_lr,
                                  epochs=profile.exercise_epochs, batch_size=profile.batch_size,
                                  seed=seed if order is None else order, progress=False)
    training.train(final, train if train is not None else _train_set(ref), recipe, pad_token_id=ref.tokenizer.pad_token_id)
    return start, final


def _train_set(ref):
    from ftcourse import data

    profile = ref.profile
    sst2 = data.load_sst2(profile.with_(train_sizes={"sst2": profile.exercise_train_size},
                                        eval_sizes={"sst2": profile.exercise_eval_size}))
    return sst2["train"].map(lambda b: ref.tokenizer(b["sentence"], truncation=True, max_length=profile.max_length),
                             batched=True, remove_columns=["sentence"]).rename_column("label", "labels")


def noisy(start, scale=1e-6, seed=0):
    """The planted cheat: every trainable weight nudged by noise, nothing trained."""
    final = copy.deepcopy(start)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in final.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=generator))
    return final


@pytest.mark.parametrize("profile_name", ["smoke", "grading"])
def test_honest_runs_descend_and_planted_noise_does_not(profile_name, shared_data):
    ref = verdicts.reference(config.get_profile(profile_name))
    margins = []
    for regime in REGIMES:
        start, final = honest(ref, regime)
        found = verdicts.descent(start, final, ref)
        verdicts._check_descent(found, f"honest {regime}")  # passes
        for scale in (1e-6, 1e-3):
            cheat = verdicts.descent(start, noisy(start, scale), ref)
            with pytest.raises(verdicts.EvidenceMissing, match="did not move down the training loss"):
                verdicts._check_descent(cheat, f"noise {scale:g} on {regime}")
            margins.append((regime, scale, found["z"], cheat["z"]))
    print(f"\n{profile_name}: least z {verdicts.DESCENT_MIN_Z}; "
          + "; ".join(f"{r} honest {h:+.3f} vs noise {s:g} {n:+.3f}" for r, s, h, n in margins))
    honest_least = min(h for _, _, h, _ in margins)
    noise_most = max(n for _, _, _, n in margins)
    assert noise_most < verdicts.DESCENT_MIN_Z < honest_least


def test_a_run_trained_on_other_labels_does_not_descend_on_the_graders_examples(shared_data):
    ref = verdicts.reference(config.get_profile("smoke"))
    flipped = _train_set(ref).map(lambda row: {"labels": 1 - row["labels"]})  # every label wrong
    start, final = honest(ref, "finetune", train=flipped)
    found = verdicts.descent(start, final, ref)
    with pytest.raises(verdicts.EvidenceMissing):
        verdicts._check_descent(found, "trained on flipped labels")


def test_a_change_between_noise_and_training_goes_for_review_never_fails():
    found = {"alignment": 0.1, "agreement": 0.55}
    verdicts._check_descent({**found, "z": verdicts.DESCENT_MIN_Z}, "a step")  # passes
    with pytest.raises(verdicts.DescentUnclear, match="For the instructor"):
        verdicts._check_descent({**found, "z": 3.0}, "a weak step")
    with pytest.raises(verdicts.EvidenceMissing, match="did not move down") as failed:
        verdicts._check_descent({**found, "z": 1.0}, "noise")
    assert not isinstance(failed.value, verdicts.ForReview)


def test_an_honest_head_read_in_an_unlucky_order_is_not_failed(shared_data):
    """At the grading profile the head alone is the thin case: read in order 2 (of 12 measured, 3.7 to
    16.4) it sits under DESCENT_MIN_Z, and must come to the instructor, not fail."""
    ref = verdicts.reference(config.get_profile("grading"))
    found = verdicts.descent(*honest(ref, "frozen", order=2), ref)
    print(f"\nhonest head, order 2: z {found['z']:+.2f}")
    try:
        verdicts._check_descent(found, "honest head, order 2")
    except verdicts.DescentUnclear:
        pass


@pytest.mark.parametrize("profile_name", ["smoke", "grading"])
def test_honest_runs_fit_the_graders_examples_and_a_tiny_subset_does_not(profile_name, shared_data):
    """The fit check: a run trained on 2 of the sentences still steps down the whole set's loss (its descent
    passes at the grading profile), but it fits the grader's training examples no better than unseen ones."""
    ref = verdicts.reference(config.get_profile(profile_name))
    train = _train_set(ref)
    margins = []
    for regime in ("frozen", "finetune"):
        start, final = honest(ref, regime)
        found = verdicts.fit(start, final, ref)
        verdicts._check_fit(found, f"honest {regime}")  # passes
        for kept in (range(2), range(len(train) - 2, len(train))):
            tiny = verdicts.fit(start, honest(ref, regime, train=train.select(kept))[1], ref)
            with pytest.raises(verdicts.FitUnclear, match="For the instructor"):
                verdicts._check_fit(tiny, f"{regime} on 2 sentences")
            margins.append((regime, found["z"], tiny["z"]))
    print(f"\n{profile_name}: least fit z {verdicts.FIT_MIN_Z}; "
          + "; ".join(f"{r} honest {h:+.2f} vs 2 sentences {t:+.2f}" for r, h, t in margins))


def test_a_fit_under_the_line_goes_for_review_never_fails():
    found = {"n_train": 128, "n_unseen": 512}
    verdicts._check_fit({**found, "z": verdicts.FIT_MIN_Z}, "a fitted step")  # passes
    with pytest.raises(verdicts.FitUnclear, match="faster than those of 512 sentences"):
        verdicts._check_fit({**found, "z": 0.3}, "a step on 2 sentences")
    with pytest.raises(verdicts.FitUnclear):
        verdicts._check_fit({**found, "z": float("nan")}, "a broken reading")
