"""The grader's own data: the sandbox gets only the exercise's training and dev rows, and the grader
keeps the rest of the dev set, scored where a submission cannot have trained on it."""

import pytest
import torch

from ftcourse import config, data
from ftcourse.course import exercise_bert_base, verdicts


@pytest.fixture(scope="module")
def profile():
    return config.get_profile("grading")


def test_the_sandbox_holds_the_exercise_rows_and_the_grader_keeps_the_rest(profile, tmp_path, monkeypatch):
    train, dev, held = verdicts.grader_split(profile)
    full = data.load_sst2(profile, full=True)
    assert len(train) == profile.exercise_train_size and len(dev) == profile.exercise_eval_size
    assert len(dev) + len(held) == len(full["validation"])
    assert not set(dev["sentence"]) & set(held["sentence"])  # no held-out sentence is in the sandbox's dev set
    exercise_bert_base.sandbox_data(profile, tmp_path)
    monkeypatch.setenv("FTCOURSE_DATA", str(tmp_path))
    seen = data.load_sst2(profile.with_(train_sizes={"sst2": profile.exercise_train_size},
                                        eval_sizes={"sst2": profile.exercise_eval_size}))
    # the exercise's own loader, reading the sandbox's folder, gets exactly the grader's rows, in its order
    assert seen["train"]["sentence"] == train["sentence"] and seen["validation"]["sentence"] == dev["sentence"]
    assert not set(seen["validation"]["sentence"]) & set(held["sentence"])


def test_half_the_dev_set_at_most_goes_to_the_sandbox(profile):
    _, dev, held = verdicts.grader_split(profile.with_(exercise_eval_size=None))
    assert len(dev) == len(held) or len(dev) == len(held) - 1


def test_a_run_that_scores_its_dev_set_far_above_the_held_out_sentences_is_sent_for_review():
    assert verdicts.held_out_gap(0.80, 0.79, 256, 616) < verdicts.HELD_OUT_MIN_Z  # sampling noise: passes
    assert verdicts.held_out_gap(0.70, 0.75, 256, 616) < 0  # held out above dev: nothing to flag
    assert verdicts.held_out_gap(1.00, 0.60, 256, 616) > verdicts.HELD_OUT_MIN_Z  # memorised dev: flagged
    assert verdicts.held_out_gap(1.00, 0.55, 32, 840) > verdicts.HELD_OUT_MIN_Z  # at smoke's 32 dev sentences too


def test_the_loss_gap_reads_a_planted_tie_as_noise_and_a_planted_fit_as_a_fit():
    generator = torch.Generator().manual_seed(0)
    held = torch.rand(616, generator=generator) + 0.2  # per-example losses of sentences never trained on
    tie = held[torch.randperm(616, generator=generator)[:256]]  # the same distribution: a tie
    fitted = tie * 0.7  # the dev sentences' losses lowered by training on them
    assert abs(verdicts.held_out_loss_gap(tie, held)) < verdicts.HELD_OUT_LOSS_MIN_T
    assert verdicts.held_out_loss_gap(held * 0 + 1, held) < 0  # dev worse than held out: nothing to flag
    assert verdicts.held_out_loss_gap(fitted, held) > verdicts.HELD_OUT_LOSS_MIN_T


def test_a_run_trained_one_epoch_on_the_dev_set_is_caught_by_its_losses_not_its_accuracy(shared_data):
    """The cheat the accuracy gap misses at smoke (32 dev sentences): fine-tuning on train + dev for the
    exercise's one epoch lifts dev accuracy by about 27 points, 2.8 standard errors: under HELD_OUT_MIN_Z."""
    from datasets import concatenate_datasets

    from ftcourse import config
    from test_grading_descent import _train_set, honest

    ref = verdicts.reference(config.get_profile("smoke"))
    train = _train_set(ref)
    both = concatenate_datasets([train, ref.dev_set.select_columns(train.column_names).cast(train.features)])
    for data, flagged in ((train, False), (both, True)):
        _, final = honest(ref, "finetune", train=data)
        dev, held = verdicts.rescore(final, ref), verdicts.rescore(final, ref, ref.held_out)
        t = verdicts.held_out_loss_gap(verdicts.example_losses(final, ref, ref.dev_set),
                                       verdicts.example_losses(final, ref, ref.held_out))
        print(f"trained on {'train + dev' if flagged else 'train'}: dev {dev:.3f} held {held:.3f} loss gap {t:+.1f}")
        assert (t > verdicts.HELD_OUT_LOSS_MIN_T) == flagged
        if flagged:
            with pytest.raises(verdicts.HeldOutGap, match="trained on the dev set"):
                verdicts._check_held_out(final, dev, held, ref, "planted")
        else:
            verdicts._check_held_out(final, dev, held, ref, "honest")
