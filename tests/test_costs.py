"""The cost accounting reproduces the published bert-base figures exactly, from the config."""

import pytest
from transformers import BertConfig

from ftcourse import costs, derived

TINY = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100)


def test_bert_base_backbone_and_lora_match_the_derived_counts():
    assert costs.backbone_parameters() == derived.bert_base_parameters() == 109_482_240
    assert round(costs.backbone_parameters() * 4 / costs.MIB, 1) == round(derived.claims()["backbone_mib"], 1)
    assert costs.lora_parameters() == derived.lora_parameters() == 12 * 2 * (768 * 8 + 8 * 768)
    assert costs.lora_parameters_formula() == 294_912


def test_lora_count_follows_rank_and_targets():
    # query, key, value are 32x32 in TINY; r * (in + out) per layer, 2 layers.
    assert costs.lora_parameters(TINY, rank=4, targets=("query",)) == 2 * 4 * (32 + 32)
    assert costs.lora_parameters(TINY, rank=4, targets=("query", "key", "value")) == 3 * 2 * 4 * 64
    assert costs.lora_parameters(TINY, 4, ("query",)) == costs.lora_parameters_formula(TINY, 4, ("query",))


def test_peft_counts_the_head_with_lora_and_we_split_it():
    split = costs.split_trainable(costs.lora_sequence_classifier())
    assert split == {"adapter": 294_912, "head": 768 * 2 + 2, "trainable": 296_450}


def test_prompt_tuning_and_houlsby_counts():
    assert costs.prompt_tuning_parameters(TINY, 10) == 10 * 32
    per_adapter = 32 * 8 + 8 + 8 * 32 + 32
    assert costs.houlsby_adapter_parameters(TINY, 8, train_layer_norms=False) == 2 * 2 * per_adapter
    assert costs.houlsby_adapter_parameters(TINY, 8) == 2 * (2 * per_adapter + 2 * 64)
    with pytest.raises(ValueError, match="bottleneck_size"):
        costs.houlsby_adapter_parameters(TINY, 0)


def test_storage_figures_for_eight_tasks():
    by_name = {c.regime: c for c in costs.regime_costs()}
    head, lora, full = by_name["frozen + linear head"], by_name["LoRA"], by_name["full fine-tuning"]
    assert head.per_task_bytes == 6_152
    assert round(lora.per_task_bytes / costs.MIB, 2) == 1.13
    assert round(100 * (lora.trainable - lora.head) / costs.backbone_parameters(), 2) == 0.27
    assert round(full.per_task_bytes / lora.per_task_bytes) == 369
    assert round(lora.total_bytes(8) / costs.MIB, 1) == 426.7
    assert full.total_bytes(8) == 8 * full.per_task_bytes
    assert lora.total_bytes(0) == 0
    table = str(costs.regime_storage_table(list(by_name.values()), 8))
    assert "426.7" in table and "369x" in table and "0.27%" in table


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="Known regimes"):
        costs.regime_costs(TINY, regimes=["lora"])
    with pytest.raises(ValueError, match="Known: fp32"):
        costs.regime_costs(TINY, dtype="int3")
