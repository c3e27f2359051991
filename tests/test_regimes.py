"""Lesson 3's regime runs: budget, the linear probe, the crossover, one tiny run per regime."""

import datasets
import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import regimes


def test_small_sets_get_more_epochs():
    assert regimes.epochs_for(32, min_examples=256) == 8
    assert regimes.epochs_for(512, min_examples=256) == 1
    assert regimes.epochs_for(512, min_examples=256, epochs=3) == 3
    with pytest.raises(ValueError, match="at least 1"):
        regimes.epochs_for(0, 10)


def test_linear_probe_folds_standardisation_into_a_plain_linear():
    torch.manual_seed(0)
    # Two classes separated along a dimension whose scale is 1000x the others'.
    features = torch.randn(100, 8)
    labels = (features[:, 3] > 0).long()
    features[:, 3] *= 1000
    features += 50
    probe, seconds = regimes.train_linear_probe(features, labels, steps=100)
    assert isinstance(probe, torch.nn.Linear) and seconds >= 0
    accuracy = (probe(features).argmax(-1) == labels).float().mean().item()
    assert accuracy > 0.95


def _cell(*accuracies):
    return {"mean": sum(accuracies) / len(accuracies), "by_seed": dict(enumerate(accuracies))}


def test_crossover_needs_a_lasting_win_that_the_seeds_resolve():
    summary = {("frozen", 32): _cell(0.70, 0.71, 0.69), ("finetune", 32): _cell(0.60, 0.61, 0.60),
               ("frozen", 128): _cell(0.70, 0.71, 0.69), ("finetune", 128): _cell(0.75, 0.77, 0.74),
               ("frozen", 512): _cell(0.70, 0.71, 0.69), ("finetune", 512): _cell(0.80, 0.82, 0.79)}
    assert regimes.crossover(summary) == 128
    assert regimes.best_regime_by_size(summary) == {32: "frozen", 128: "finetune", 512: "finetune"}
    summary[("finetune", 512)] = _cell(0.60, 0.61, 0.60)
    assert regimes.crossover(summary) is None  # a win that does not last is no crossover
    # a higher mean inside the seeds' noise (seed 1 reverses the order) is a tie, never a crossover
    summary[("finetune", 512)] = _cell(0.78, 0.65, 0.77)
    assert regimes.crossover(summary) is None
    assert regimes.best_regime_by_size(summary)[512] == "tie: finetune, frozen"


def tiny_encoder(layers: int):
    torch.manual_seed(0)
    return BertModel(BertConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                                intermediate_size=64, vocab_size=100), add_pooling_layer=False)


def toy_sentences(n: int) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"input_ids": [[2, 5 + i % 7, 9, 3] for i in range(n)],
                                       "attention_mask": [[1] * 4] * n, "labels": [i % 2 for i in range(n)]})


def test_each_regime_runs_and_reports_its_costs():
    encoder, data = tiny_encoder(2), toy_sentences(16)
    train_features, _ = regimes.sentence_features(encoder, data, "cls"), None
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    results = {}
    for regime in regimes.REGIMES:
        results[regime] = regimes.run_regime(regime, encoder, data, data, "offline", epochs=1,
                                             train_features=train_features, dev_features=train_features)
    assert all(torch.equal(before[k], v) for k, v in encoder.state_dict().items())  # never modified
    assert results["frozen"].trainable == 32 * 2 + 2 and results["frozen"].bytes_per_task == 4 * 66
    assert results["lora"].trainable == 2 * 2 * 8 * (32 + 32) + 66
    assert results["finetune"].bytes_per_task == 4 * (sum(p.numel() for p in encoder.parameters()) + 66)
    assert all(0 <= r.accuracy <= 1 for r in results.values())
    # 16 examples in batches of the profile's 16: one step a run; the frozen head converges unless told
    assert (results["lora"].steps, results["finetune"].steps, results["frozen"].steps) == (1, 1, regimes.PROBE_STEPS)
    with pytest.raises(ValueError, match="cached features"):
        regimes.run_regime("frozen", encoder, data, data, "offline")
    with pytest.raises(ValueError, match="Known regimes"):
        regimes.run_regime("adapters", encoder, data, data, "offline")


def test_features_pool_cls_or_mean_and_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCOURSE_CACHE", str(tmp_path))
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32, vocab_size=50), add_pooling_layer=False).eval()
    # Two lengths: mean pooling must ignore the padding that batching adds to the short one.
    data = datasets.Dataset.from_dict({"input_ids": [[2, 5, 6, 3], [2, 7, 3]], "attention_mask": [[1] * 4, [1] * 3],
                                       "labels": [0, 1]})
    with torch.inference_mode():
        alone = encoder(input_ids=torch.tensor([[2, 7, 3]])).last_hidden_state[0]
    cls = regimes.sentence_features(encoder, data, "cls")
    mean = regimes.sentence_features(encoder, data, "mean")
    assert cls.shape == mean.shape == (2, 16)
    assert torch.allclose(cls[1], alone[0], atol=1e-5) and torch.allclose(mean[1], alone.mean(0), atol=1e-5)
    features, seconds = regimes.cached_features(encoder, data, "toy", "mean")
    assert seconds > 0 and torch.allclose(features, mean)
    again, seconds = regimes.cached_features(encoder, data, "toy", "mean")
    assert seconds == 0.0 and torch.equal(again, features)
    assert not torch.equal(regimes.cached_features(encoder, data, "toy", "cls")[0], features)
    with pytest.raises(ValueError, match="Unknown pooling"):
        regimes.sentence_features(encoder, data, "max")


def test_linear_probe_rejects_mismatched_or_empty_data():
    with pytest.raises(ValueError, match="same examples"):
        regimes.train_linear_probe(torch.zeros(4, 3), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="empty"):
        regimes.train_linear_probe(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))


def test_the_three_regimes_run_on_sst5_with_a_five_class_head(shared_data, tiny_bert, tokenizer):
    """A five-label set through the public API, as a student bringing their own data would."""
    from ftcourse import data

    sst5 = data.load_sst5(full=True)
    train = regimes.tokenize_sentences(data.subsample(sst5["train"], 40), tokenizer, 32)
    dev = regimes.tokenize_sentences(data.subsample(sst5["validation"], 24), tokenizer, 32)
    assert regimes.num_labels_of(train, dev) == 5
    features = {name: regimes.sentence_features(tiny_bert, split, "cls") for name, split in (("train", train), ("dev", dev))}
    for regime in regimes.REGIMES:
        result, model = regimes.run_regime(regime, tiny_bert, train, dev, "offline", train_features=features["train"],
                                           dev_features=features["dev"], keep_model=True)
        classes = model.out_features if regime == "frozen" else model.head.classifier.out_features
        assert classes == 5 and 0 <= result.accuracy <= 1, regime


def test_labels_outside_the_head_and_missing_columns_are_clear_errors(tokenizer):
    rows = datasets.Dataset.from_dict({"text": ["good", "bad"], "stars": [1, 7]})
    with pytest.raises(ValueError, match=r"missing \['sentence', 'label'\].*Fix: pass text="):
        regimes.tokenize_sentences(rows, tokenizer, 16)
    encoded = regimes.tokenize_sentences(rows, tokenizer, 16, text="text", label="stars")
    assert regimes.num_labels_of(encoded) == 8  # no names: one more than the largest label
    named = encoded.cast_column("labels", datasets.ClassLabel(names=["a", "b", "c", "d", "e", "f", "g", "h"]))
    too_few = datasets.Dataset.from_dict({"labels": [0, 9]})
    with pytest.raises(ValueError, match=r"Labels \[9\] are outside the head's 8 classes"):
        regimes.num_labels_of(named, too_few)
    with pytest.raises(ValueError, match="outside the head's 2 classes"):
        regimes.train_linear_probe(torch.randn(2, 4), torch.tensor([0, 3]))
    pairs = datasets.Dataset.from_dict({"a": ["a cat"], "b": ["a dog"], "label": [1]})
    encoded = regimes.tokenize_sentences(pairs, tokenizer, 16, text=("a", "b"))
    assert encoded[0]["input_ids"].count(tokenizer.sep_token_id) == 2  # [CLS] a [SEP] b [SEP]


def test_accuracy_figures_give_each_regime_at_one_size():
    summary = {(r, 64): {"mean": m, "std": 0.0, "n": 3} for r, m in zip(regimes.REGIMES, (0.7, 0.8, 0.75))}
    figures = regimes.accuracy_figures(summary, 64)
    assert [f[0] for f in figures] == ["frozen head, 64 examples", "LoRA, 64 examples", "full fine-tuning, 64 examples"]
    assert figures[1][1:] == (80.0, None, "SST-2 dev accuracy x100, mean of 3 seeds")


def test_under_equal_steps_the_frozen_head_gets_the_trained_regimes_budget(monkeypatch):
    encoder, pool = tiny_encoder(1), toy_sentences(40)
    monkeypatch.setattr(regimes, "cached_features", lambda enc, data, name, pooling: (
        regimes.sentence_features(enc, data, pooling), None))
    for equal, frozen_steps in ((True, {8: 4, 40: 3}), (False, {8: regimes.PROBE_STEPS, 40: regimes.PROBE_STEPS})):
        results, _ = regimes.learning_curve(encoder, pool, pool, (8, 40), (0,), "smoke", min_examples=32,
                                            equal_steps=equal)
        steps = {(r.regime, r.train_size): r.steps for r in results}
        # 8 examples: 4 epochs (32 seen) of one batch each = 4 steps; 40 examples: 1 epoch = 3 batches of 16
        assert steps[("finetune", 8)] == steps[("lora", 8)] == 4 and steps[("finetune", 40)] == 3
        assert {size: steps[("frozen", size)] for size in (8, 40)} == frozen_steps


def test_a_curve_that_falls_with_more_data_is_found():
    summary = {("lora", 64): {"mean": 0.56}, ("lora", 256): {"mean": 0.53}, ("lora", 1024): {"mean": 0.79},
               ("frozen", 64): {"mean": 0.70}, ("frozen", 256): {"mean": 0.71}}
    assert regimes.drops(summary, "lora") == [(64, 256)]
    assert regimes.drops(summary, "frozen") == []


def test_the_curve_table_prints_every_runs_steps_and_the_fall_is_read_against_the_lr():
    runs = [regimes.RegimeResult(regime, size, seed, 1, acc + 0.01 * seed, 10, 1.0, 0, 40, steps)
            for regime, size, acc, steps in (("frozen", 64, 0.70, 32), ("lora", 64, 0.56, 32), ("frozen", 256, 0.71, 32),
                                             ("lora", 256, 0.52, 32)) for seed in (0, 1, 2)]
    summary = regimes.summarize(runs)
    assert summary[("lora", 64)]["steps"] == (32,)
    table = regimes.learning_curve_table(summary)
    assert table.columns[-1] == "steps (every run)" and [row[-1] for row in table.rows] == ["32", "32"]
    assert not regimes.within_spread(summary, "lora", (64, 256))  # 0.04 down, seeds spread by 0.01
    fixed = {("lora", 64): {"mean": 0.70}, ("lora", 256): {"mean": 0.74}}
    line = regimes.fall_line(summary, fixed, "lora", (64, 256))
    assert "more than the seeds' spread" in line and line.endswith("the lr, too small for so few steps, explains it")
    stays = {("lora", 64): {"mean": 0.60}, ("lora", 256): {"mean": 0.55}}
    assert regimes.fall_line(summary, stays, "lora", (64, 256)).endswith("stays: the lr does not explain it")
    # a rerun that collapses to chance at both sizes "rises" by nothing and explains nothing
    collapsed = {("lora", 64): {"mean": 0.509}, ("lora", 256): {"mean": 0.509}}
    assert regimes.fall_line(summary, collapsed, "lora", (64, 256)).endswith("stays: the lr does not explain it")
    with pytest.raises(ValueError, match="recheck_at_lr"):
        regimes.fall_line(summary, None, "lora", (64, 256))


def test_a_fall_within_the_seeds_spread_is_read_as_seed_variance():
    summary = {("lora", 256): {"mean": 0.752, "std": 0.014, "steps": (32,)},
               ("lora", 512): {"mean": 0.742, "std": 0.018, "steps": (32,)}}
    assert regimes.within_spread(summary, "lora", (256, 512))
    assert regimes.fall_line(summary, None, "lora", (256, 512)).endswith("seed variance explains it, not the lr or the steps")


def test_the_recheck_reruns_only_that_regime_at_those_sizes_at_a_larger_lr(monkeypatch):
    seen = []

    def fake_run(regime, encoder, train, dev, profile, seed=0, epochs=1, **kwargs):
        seen.append((regime, len(train), seed, epochs, profile.lora_lr))
        result = regimes.RegimeResult(regime, len(train), seed, epochs, 0.5, 1, 1.0, 0, 4, epochs)
        return (result, None) if kwargs.get("keep_model") else result

    monkeypatch.setattr(regimes, "run_regime", fake_run)
    pool = datasets.Dataset.from_dict({"input_ids": [[2, 3]] * 40, "attention_mask": [[1, 1]] * 40, "labels": [0, 1] * 20})
    profile = regimes.config.get_profile("smoke").with_(lora_lr=1e-3)
    summary = regimes.recheck_at_lr(None, pool, pool, (8, 40), (0, 1), profile, "lora", min_examples=32, epochs=1)
    assert set(summary) == {("lora", 8), ("lora", 40)}
    assert seen == [("lora", n, s, e, pytest.approx(4e-3)) for n, e in ((8, 4), (40, 1)) for s in (0, 1)]


def test_each_run_trains_at_the_lr_chosen_for_its_step_budget(monkeypatch):
    seen = []

    def fake_run(regime, encoder, train, dev, profile, seed=0, epochs=1, **kwargs):
        seen.append((regime, len(train), getattr(profile, regimes.LR_FIELDS[regime])))
        result = regimes.RegimeResult(regime, len(train), seed, epochs, 0.5, 1, 1.0, 0, 4, epochs)
        return (result, None) if kwargs.get("keep_model") else result

    monkeypatch.setattr(regimes, "run_regime", fake_run)
    pool = datasets.Dataset.from_dict({"input_ids": [[2, 3]] * 64, "attention_mask": [[1, 1]] * 64, "labels": [0, 1] * 32})
    # 8 examples seen twice: 2 steps of batch 16; 64 examples once: 4 steps, a budget the table leaves out
    profile = regimes.config.get_profile("smoke").with_(lora_lr=1e-3, finetune_lr=1e-4, regime_batch_size=16,
                                                        learning_curve_lrs={2: {"lora": 8e-3}})
    regimes.learning_curve(None, pool, pool, (8, 64), (0,), profile, min_examples=16, regimes=("lora", "finetune"),
                           epochs=1)
    assert seen == [("lora", 8, 8e-3), ("finetune", 8, 1e-4), ("lora", 64, 1e-3), ("finetune", 64, 1e-4)]
    assert regimes.budget_lrs(profile, 2) == {"frozen": profile.probe_lr, "lora": 8e-3, "finetune": 1e-4}
    again = regimes.at_budget(profile, 2, {"lora": 4.0})
    assert again.lora_lr == pytest.approx(3.2e-2) and again.finetune_lr == 1e-4
    table = regimes.budget_table((8, 64), 16, 1, profile=profile)
    assert table.columns == ["examples", "epochs", "optimiser steps", "frozen lr", "lora lr", "finetune lr"]
    assert [row[:5] for row in table.rows] == [[8, 2, 2, f"{profile.probe_lr:g}", "0.008"], [64, 1, 4, f"{profile.probe_lr:g}", "0.001"]]
