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


# ----------------------------------------------------------------------------- every method


def _closed_forms(config) -> dict:
    """Each method's own parameters by hand, from the config's shapes alone (d hidden, I
    feed-forward, L layers), keyed by (method, setting) as peft_method_costs names them."""
    d, ffn, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    qv = lambda r: layers * 2 * r * (d + d)  # A (r x d_in) + B (d_out x r), on query and value
    return {
        ("frozen + linear head", "[CLS] features, backbone shared"): 0,
        # per layer: q, k, v, attention output, 2 LayerNorms, FFN output (d each) + FFN in (I);
        # plus the embeddings' LayerNorm and the pooler
        ("BitFit", "every bias, layer norms' and pooler's too"): layers * (7 * d + ffn) + 2 * d,
        ("prompt tuning", "20 virtual tokens"): 20 * d,
        # key, value (their outputs, d), and the inputs of attention.output.dense (d) and the
        # FFN's output.dense (I): peft's "output.dense" matches both by suffix
        ("(IA)³", "peft default: key, value, output.dense (attention's and FFN's)"): layers * (3 * d + ffn),
        ("LoRA", "r=1 on query, value"): qv(1),
        ("LoRA", "r=8 on query, value"): qv(8),
        ("LoRA", "r=32 on query, value"): qv(32),
        ("LoRA", "r=8 on every attention and MLP projection"): layers * 8 * (4 * (d + d) + 2 * (d + ffn)),
        ("DoRA", "r=8 on query, value"): qv(8) + layers * 2 * d,  # + a magnitude per output of each
        ("Houlsby adapters", "bottleneck 64, 2 per layer, + layer norms"):
            layers * 2 * ((d * 64 + 64 + 64 * d + d) + 2 * d),
        ("full fine-tuning", "every weight, a full copy per task"): costs.backbone_parameters(config),
    }


@pytest.fixture(scope="module")
def bert_base_methods():
    return costs.peft_method_costs()


def _check_rows(rows, config, num_labels):
    expected = _closed_forms(config)
    assert [(c.regime, c.detail) for c in rows] == list(expected)
    head = config.hidden_size * num_labels + num_labels
    backbone = costs.backbone_parameters(config)
    for c in rows:
        assert (c.method_parameters, c.head) == (expected[c.regime, c.detail], head), (c.regime, c.detail)
        assert c.trainable == c.method_parameters + head and c.backbone == backbone
        assert c.share == pytest.approx(100 * c.method_parameters / backbone)
        assert c.per_task_bytes == 4 * (c.method_parameters + head)  # full FT: its method is the whole backbone
        assert c.shared == (0 if c.regime == "full fine-tuning" else backbone)
        assert (c.counted == "formula") == (c.regime == "Houlsby adapters")


def test_every_method_on_bert_base_matches_its_closed_form_and_the_published_figures(bert_base_methods):
    _check_rows(bert_base_methods, BertConfig(), 2)
    by = {(c.regime, c.detail): c for c in bert_base_methods}
    assert by["LoRA", "r=8 on query, value"].method_parameters == 294_912
    assert by["full fine-tuning", "every weight, a full copy per task"].method_parameters == 109_482_240
    assert by["(IA)³", "peft default: key, value, output.dense (attention's and FFN's)"].method_parameters == 64_512
    assert by["DoRA", "r=8 on query, value"].method_parameters == 294_912 + 24 * 768
    assert by["BitFit", "every bias, layer norms' and pooler's too"].method_parameters == 102_912
    assert by["Houlsby adapters", "bottleneck 64, 2 per layer, + layer norms"].method_parameters == 2_416_128
    every = by["LoRA", "r=8 on every attention and MLP projection"].method_parameters
    assert every == costs.lora_parameters_formula(None, 8, costs.ALL_PROJECTIONS) == 1_327_104  # no pooler


def test_every_method_follows_the_config_not_bert_base_constants():
    _check_rows(costs.peft_method_costs(TINY, num_labels=3), TINY, 3)


def test_ia3_uses_peft_defaults_for_bert():
    from peft.utils.constants import (TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING as FEEDFORWARD,
                                      TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING as TARGETS)

    ia3 = costs.ia3_classifier(TINY).peft_config["default"]
    assert ia3.target_modules == set(TARGETS["bert"]) == {"key", "value", "output.dense"}
    assert ia3.feedforward_modules == set(FEEDFORWARD["bert"]) == {"output.dense"}


def test_peft_copies_the_head_and_it_is_counted_once():
    for model in (costs.lora_sequence_classifier(TINY), costs.lora_sequence_classifier(TINY, use_dora=True),
                  costs.ia3_classifier(TINY), costs.prompt_tuning_classifier(TINY, 10)):
        classifier = {n: p for n, p in model.named_parameters() if ".classifier." in n}
        assert sum(p.numel() for p in classifier.values()) == 2 * (32 * 2 + 2)  # original and trained copy
        assert sum(p.numel() for p in classifier.values() if p.requires_grad) == 32 * 2 + 2
        split = costs.split_trainable(model)
        assert split["head"] == 32 * 2 + 2
        assert split["trainable"] == model.get_nb_trainable_parameters()[0]  # peft's own count agrees


def test_method_table_and_every_methods_storage_plot(bert_base_methods):
    import matplotlib

    matplotlib.use("Agg")
    table = costs.method_costs_table(bert_base_methods)
    assert table.columns == ["method", "setting", "method params", "head", "share %", "MiB per task", "counted"]
    text = str(table)
    assert "294,912" in text and "109,482,240" in text and "not built by a library" in text
    assert "0.269" in text and "417.647" in text and "1.131" in text
    ax = costs.plot_storage(bert_base_methods, max_tasks=10, references=("full fine-tuning", "frozen + linear head"))
    labels = [line.get_label() for line in ax.get_lines()]
    assert len(labels) == len(bert_base_methods) and any(label.startswith("Houlsby adapters") for label in labels)
    grey = [line.get_label().split(" (")[0] for line in ax.get_lines() if line.get_color() == "grey"]
    assert grey == ["frozen + linear head", "full fine-tuning"]
    houlsby = next(line for line in ax.get_lines() if line.get_label().startswith("Houlsby"))
    assert houlsby.get_ydata()[0] == pytest.approx((109_482_240 + 2_416_128 + 1_538) * 4 / costs.MIB)
    assert costs.draw_method_storage(costs=bert_base_methods, n_tasks=8) == bert_base_methods


def test_the_regime_table_keeps_its_lora_row_and_columns():
    table = costs.regime_storage_table(costs.regime_costs(TINY), 8)
    assert table.columns == ["regime", "detail", "trainable", "% of model", "per task", "x less", "8 tasks (MiB)"]
    assert [row[:2] for row in table.rows if row[0] == "LoRA"] == [["LoRA", "r=8 on query, value"]]
