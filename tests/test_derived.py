"""The course's arithmetic, computed from formulas, against the real models peft and
transformers build: two independent counts of each figure."""

import pytest

from ftcourse import costs, derived, report


def test_the_formulas_match_the_real_bert_base_and_its_lora():
    assert derived.bert_base_parameters() == costs.backbone_parameters()
    assert derived.bert_base_parameters(with_pooler=False) == costs.backbone_parameters(add_pooling_layer=False)
    assert derived.lora_parameters() == costs.lora_parameters()
    assert derived.lora_parameters(rank=4, targets=("query", "key", "value")) == costs.lora_parameters(
        rank=4, targets=("query", "key", "value"))


def test_the_course_texts_claims_follow_from_the_formulas():
    claims = derived.claims()
    assert round(claims["backbone_parameters"] / 1e6, 1) == 109.5
    assert round(claims["backbone_mib"]) == 418
    assert claims["lora_parameters"] == 294_912
    assert round(claims["lora_percent"], 2) == 0.27 and round(claims["lora_task_mib"], 2) == 1.13
    assert round(claims["head_kib"]) == 6 and round(claims["times_less_than_full_copy"]) == 369
    assert round(claims["tasks_total_mib"], 1) == 426.7


def test_a_derived_column_is_never_called_published():
    table = report.versus([("LoRA parameters", 294_912, derived.lora_parameters())], against="derived")
    assert table.columns == ["quantity", "measured", "derived", "unit"]
    with pytest.raises(ValueError, match="'published' .* or 'derived'"):
        report.versus([], against="paper")


def test_lesson_3s_headline_figures_carry_the_derived_figure_as_a_note():
    peft_model = costs.lora_sequence_classifier(rank=8, targets=("query", "value"))
    split = costs.split_trainable(peft_model)
    figures = costs.lora_headline_figures(split, costs.backbone_parameters(), 4 * (split["adapter"] + split["head"]))
    assert [f.measured for f in figures] == [294_912, 0.27, 1.13] and all(f.published is None for f in figures)
    assert figures[0].note == "derived: 294,912"
