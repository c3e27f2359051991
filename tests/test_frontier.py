"""The parameter-efficient frontier: each method trains what it says, on one loop and budget."""

import datasets
import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import config, data, frontier, heads, models

HIDDEN, LAYERS, INTERMEDIATE = 32, 2, 64


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    return BertModel(BertConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
                                intermediate_size=INTERMEDIATE, vocab_size=60, max_position_embeddings=64),
                     add_pooling_layer=False)


def toy(n, seed):
    g = torch.Generator().manual_seed(seed)
    rows = {"input_ids": [], "attention_mask": [], "labels": []}
    for _ in range(n):
        label = int(torch.randint(0, 2, (1,), generator=g))
        length = int(torch.randint(3, 8, (1,), generator=g))
        body = torch.randint(10 + 20 * label, 30 + 20 * label, (length,), generator=g).tolist()  # separable
        rows["input_ids"].append([2, *body, 3])
        rows["attention_mask"].append([1] * (length + 2))
        rows["labels"].append(label)
    return datasets.Dataset.from_dict(rows)


def test_each_method_trains_exactly_its_own_parameters(encoder):
    lora_qv = LAYERS * 2 * 2 * 8 * HIDDEN
    expected = {
        "frozen + linear head": 0,
        "BitFit": sum(p.numel() for n, p in encoder.named_parameters() if n.endswith("bias")),
        "prompt tuning": frontier.NUM_VIRTUAL_TOKENS * HIDDEN,
        # peft's BERT targets: key, value, both output projections (suffix "output.dense"): one vector each
        "(IA)³": LAYERS * (HIDDEN + HIDDEN + HIDDEN + INTERMEDIATE),
        "LoRA r=1": lora_qv // 8, "LoRA r=8": lora_qv, "LoRA r=32": 4 * lora_qv,
        "LoRA r=8, every projection": LAYERS * 8 * (4 * 2 * HIDDEN + 2 * (HIDDEN + INTERMEDIATE)),
        "DoRA r=8": lora_qv + LAYERS * 2 * HIDDEN,  # and one magnitude per output feature
        "full fine-tuning": heads.count_parameters(encoder)["total"],
    }
    assert set(expected) == set(frontier.METHOD_NAMES)
    before = models.fingerprint(encoder)
    for m in frontier.METHODS:
        model = frontier.build_model(m, encoder, num_labels=3)
        split = frontier.trainable_split(model)
        assert split == {"method": expected[m.name], "head": HIDDEN * 3 + 3}, m.name
    assert models.fingerprint(encoder) == before and all(p.requires_grad for p in encoder.parameters())


def test_prompt_tuning_hides_its_virtual_positions_from_the_head(encoder):
    model = frontier.PromptTunedEncoder(encoder)
    ids, mask = torch.tensor([[2, 11, 12, 3]]), torch.ones(1, 4, dtype=torch.long)
    states = model(ids, mask).last_hidden_state
    assert states.shape == (1, 4, HIDDEN)
    with torch.no_grad():
        next(p for p in model.parameters() if p.requires_grad).add_(1.0)  # the prompt moves the sentence's states
    assert not torch.allclose(model(ids, mask).last_hidden_state, states)


def test_the_sweep_chooses_on_validation_and_the_chosen_lr_trains_every_seed(encoder, tmp_path):
    from ftcourse.experiments import RunStore

    profile = config.get_profile("smoke").with_(frontier_epochs=2, regime_batch_size=8)
    methods = [frontier.method("frozen + linear head"), frontier.method("LoRA r=8")]
    validation = data.carve_validation(toy(25, 1), 24)[1]  # a chooser reads only a carved part
    result = frontier.frontier(encoder, toy(48, 0), validation, toy(24, 2), profile, methods=methods[::-1],
                               seeds=(0, 1), store=RunStore(tmp_path))
    assert list(result.choices) == ["frozen + linear head", "LoRA r=8"]  # first: its head lr is every method's
    assert result.head_lr == result.choices["frozen + linear head"].lr
    for m in methods:
        choice = result.choices[m.name]
        lrs = [r.lr for r in choice.tried]
        lo, hi = m.lrs
        assert lrs[:2] == [lo, hi] and len(lrs) >= 3  # a 2-point grid's best is at an end: the grid grows
        assert choice.lr == max(choice.tried, key=lambda r: r.validation).lr
        assert [r.seed for r in result.chosen[m.name]] == [0, 1] and {r.lr for r in result.chosen[m.name]} == {choice.lr}
    assert result.chosen["LoRA r=8"][0].spec.head_lr == result.head_lr
    summary = frontier.summarize(result)
    assert summary["LoRA r=8"]["n"] == 2 and summary["LoRA r=8"]["steps"] == 2 * 6
    assert summary["frozen + linear head"]["method_parameters"] == 0
    table = frontier.frontier_table(result, 10_000)
    assert "validation lr" in table.columns and "(the reference)" not in str(table)  # no full fine-tuning here


def test_the_validation_part_is_carved_from_training_and_never_overlaps():
    split = datasets.Dataset.from_dict({"i": list(range(100))})
    rest, validation = data.carve_validation(split, 20, seed=0)
    assert len(validation) == 20 and len(rest) == 80 and not set(rest["i"]) & set(validation["i"])
    assert data.carve_validation(split, 20, seed=0)[1]["i"] == validation["i"]  # the same rows every time
    with pytest.raises(ValueError, match="cannot be carved"):
        data.carve_validation(split, 100)


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="Known methods"):
        frontier.method("Houlsby")
