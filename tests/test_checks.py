"""ftcourse.course.checks: each check passes on a right answer and fails on a wrong one, saying
what was expected and what was found."""

import pytest
import torch
from peft import LoraConfig, get_peft_model

from ftcourse import heads

from ftcourse.course import checks


def lora(rank=8, targets=("query", "value")):
    return lambda encoder: get_peft_model(encoder, LoraConfig(r=rank, target_modules=list(targets)))


def task_model(encoder, regime=None):
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, 2))
    return heads.set_regime(model, regime) if regime else model


def test_frozen_regime_passes_and_leaves_no_gradient(tiny_bert):
    model = task_model(tiny_bert, "frozen")
    counts = checks.check_frozen_regime(model)
    assert counts["trainable"] == 32 * 2 + 2
    assert all(p.grad is None for p in model.parameters())  # the check cleans up after itself


def test_frozen_check_catches_a_moving_encoder(tiny_bert):
    with pytest.raises(checks.CheckFailed, match=r"trainable parameters of the 'frozen' regime: expected 66, found"):
        checks.check_frozen_regime(task_model(tiny_bert, "finetune"))


def test_backward_pass_reports_where_gradient_went(tiny_bert):
    touched = checks.gradients_after_backward(task_model(tiny_bert, "finetune"))
    assert touched["encoder"] and touched["head"]
    touched = checks.gradients_after_backward(task_model(tiny_bert, "frozen"))
    assert touched["encoder"] == [] and touched["head"] == ["head.classifier.weight", "head.classifier.bias"]


def test_frozen_check_catches_a_trainable_encoder_weight(tiny_bert):
    model = task_model(tiny_bert, "frozen")
    model.head.classifier.bias.requires_grad_(False)  # keeps the trainable count at 64 + 2 - 2 + 2 below
    model.encoder.embeddings.LayerNorm.bias.requires_grad_(True)
    with pytest.raises(checks.CheckFailed, match="trainable parameters of the 'frozen' regime: expected 66, found 96"):
        checks.check_frozen_regime(model)


def test_finetune_regime(tiny_bert):
    model = task_model(tiny_bert, "finetune")
    assert checks.check_finetune_regime(model)["frozen"] == 0
    with pytest.raises(checks.CheckFailed, match="'finetune' regime: expected"):
        checks.check_finetune_regime(task_model(tiny_bert, "frozen"))


def test_lora_on_bert_base_is_the_published_count():
    found = checks.check_lora_on_bert_base(lora())
    assert found["lora"] == 294_912
    assert round(found["percent"], 2) == 0.27


@pytest.mark.parametrize("wrong, message", [
    (lora(rank=4), "expected 294,912, found 147,456"),
    (lora(targets=("query", "key", "value")), "expected 294,912, found 442,368"),
    (lambda encoder: encoder, "expected 294,912, found 0"),
])
def test_lora_on_bert_base_says_expected_and_found(wrong, message):
    with pytest.raises(checks.CheckFailed, match=message):
        checks.check_lora_on_bert_base(wrong)


def test_lora_regime_and_targets(tiny_bert):
    model = task_model(lora()(tiny_bert))
    counts = checks.check_lora_regime(model)
    assert counts["trainable"] == 2 * 2 * 8 * (32 + 32) + 66
    checks.check_lora_targets(lora())
    with pytest.raises(checks.CheckFailed, match=r"the layers LoRA wraps: expected \['query', 'value'\], found \['key', 'query'\]"):
        checks.check_lora_targets(lora(targets=("query", "key")))
    with pytest.raises(checks.CheckFailed, match="rank"):
        checks.check_lora_targets(lora(rank=4))


def test_lora_regime_catches_an_unfrozen_base(tiny_bert):
    model = task_model(lora()(tiny_bert))
    model.encoder.base_model.model.embeddings.word_embeddings.weight.requires_grad_(True)
    with pytest.raises(checks.CheckFailed, match="'lora' regime: expected"):
        checks.check_lora_regime(model)


def test_seed_summary():
    def right(values):
        t = torch.tensor(values, dtype=torch.float64)
        return {"mean": t.mean().item(), "std": t.std().item(), "range": (t.max() - t.min()).item()}

    def population_std(values):
        return {**right(values), "std": torch.tensor(values, dtype=torch.float64).std(correction=0).item()}

    checks.check_seed_summary(right)
    with pytest.raises(checks.CheckFailed, match=r"\['std'\]: expected 0\.05\d+, found 0\.04"):
        checks.check_seed_summary(population_std)


def test_regime_result():
    row = {"regime": "frozen", "seed": 0, "accuracy": 0.8, "seconds_per_epoch": 1.5, "trainable": 66, "peak_mib": 3.0}
    assert checks.check_regime_result(row, "frozen") is row
    with pytest.raises(checks.CheckFailed, match="missing \\['peak_mib'\\]"):
        checks.check_regime_result({k: v for k, v in row.items() if k != "peak_mib"})
    with pytest.raises(checks.CheckFailed, match="accuracy: expected a fraction in \\[0, 1\\], found 80"):
        checks.check_regime_result({**row, "accuracy": 80})
    assert issubclass(checks.CheckFailed, AssertionError)
