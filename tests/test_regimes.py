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


def test_crossover_needs_a_lasting_win():
    summary = {("frozen", 32): {"mean": 0.7}, ("finetune", 32): {"mean": 0.6},
               ("frozen", 128): {"mean": 0.7}, ("finetune", 128): {"mean": 0.75},
               ("frozen", 512): {"mean": 0.7}, ("finetune", 512): {"mean": 0.8}}
    assert regimes.crossover(summary) == 128
    assert regimes.best_regime_by_size(summary) == {32: "frozen", 128: "finetune", 512: "finetune"}
    summary[("finetune", 512)] = {"mean": 0.6}
    assert regimes.crossover(summary) is None


def test_each_regime_runs_and_reports_its_costs():
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64, vocab_size=100), add_pooling_layer=False)
    rows = {"input_ids": [[2, 5 + i % 7, 9, 3] for i in range(16)], "attention_mask": [[1] * 4] * 16,
            "labels": [i % 2 for i in range(16)]}
    data = datasets.Dataset.from_dict(rows)
    train_features, _ = regimes.cls_features(encoder, data), None
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
    with pytest.raises(ValueError, match="cached features"):
        regimes.run_regime("frozen", encoder, data, data, "offline")
    with pytest.raises(ValueError, match="Known regimes"):
        regimes.run_regime("adapters", encoder, data, data, "offline")
