"""Lesson 3c's studies: freezing stops where it says, the tactics differ only in themselves, a
random start shares nothing with the pretrained one, and the verdicts read the runs."""

import copy

import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import ablations, config, data, heads, training
from test_frontier import toy

LAYERS = 3


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    return BertModel(BertConfig(hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2, intermediate_size=64,
                                vocab_size=60, max_position_embeddings=64), add_pooling_layer=False)


@pytest.fixture
def profile():
    return config.get_profile("smoke").with_(finetune_lr=1e-3, head_lr=1e-2, regime_batch_size=8)


def test_freeze_lower_freezes_the_embeddings_and_exactly_the_lower_k_layers(encoder):
    frozen = ablations.freeze_lower(copy.deepcopy(encoder), 2)
    for name, parameter in frozen.named_parameters():
        lower = name.startswith("embeddings.") or name.startswith(("encoder.layer.0.", "encoder.layer.1."))
        assert parameter.requires_grad is not lower, name
    assert not any(p.requires_grad for p in ablations.freeze_lower(copy.deepcopy(encoder), LAYERS).parameters())
    embeddings_only = ablations.freeze_lower(copy.deepcopy(encoder), 0)
    assert [n for n, p in embeddings_only.named_parameters() if not p.requires_grad] == \
        [n for n, _ in encoder.named_parameters() if n.startswith("embeddings.")]


@pytest.mark.parametrize("k", [-1, LAYERS + 1])
def test_an_out_of_range_k_names_the_range(encoder, k):
    with pytest.raises(ValueError, match=rf"outside this encoder's 0..{LAYERS} layers"):
        ablations.freeze_lower(encoder, k)


def test_freezing_depths_span_the_encoder():
    assert ablations.freezing_depths(BertModel(BertConfig(num_hidden_layers=6, hidden_size=32, num_attention_heads=2,
                                                          intermediate_size=64))) == (0, 2, 4, 6)
    assert ablations.freezing_depths(BertModel(BertConfig(hidden_size=32, num_attention_heads=2,
                                                          intermediate_size=64))) == (0, 4, 8, 12)


def test_the_backward_pass_stops_at_layer_k(encoder):
    """Nothing below layer k gets a gradient, so nothing there is computed for one."""
    model = heads.TaskModel(ablations.freeze_lower(copy.deepcopy(encoder), 2), heads.SentenceClassifier(32, 2))
    batch = training.collate(toy(4, 0).to_list())
    model(**batch)["loss"].backward()
    for name, parameter in model.encoder.named_parameters():
        assert (parameter.grad is not None) == name.startswith("encoder.layer.2."), name


def test_a_random_start_is_the_same_architecture_with_fresh_weights(encoder):
    fresh = ablations.reinitialized(encoder, seed=1)
    assert type(fresh) is type(encoder) and fresh.config.to_dict() == encoder.config.to_dict()
    assert fresh.pooler is None
    assert [n for n, _ in fresh.named_parameters()] == [n for n, _ in encoder.named_parameters()]
    query = dict(fresh.named_parameters())["encoder.layer.0.attention.self.query.weight"]
    assert not torch.equal(query, dict(encoder.named_parameters())["encoder.layer.0.attention.self.query.weight"])
    assert abs(query.std().item() - encoder.config.initializer_range) < 0.005  # BERT's own initialisation
    again = ablations.reinitialized(encoder, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), again.parameters()))


def test_partial_freezing_trains_less_and_stores_only_what_it_trained(encoder, profile, tmp_path):
    from ftcourse.experiments import RunStore

    store = RunStore(tmp_path)
    train, validation, dev = toy(32, 0), data.carve_validation(toy(17, 1), 16)[1], toy(16, 2)
    study = ablations.partial_freezing(encoder, train, validation, dev, profile, ks=(1, LAYERS), seeds=(0, 1),
                                       store=store)
    by = {label: group[0] for label, group in study.rows.items()}
    assert list(by) == ["nothing frozen", "k=1", f"k={LAYERS}", "LoRA r=8"]
    total = heads.count_parameters(encoder)["total"] + 32 * 2 + 2
    assert by["nothing frozen"].trainable == total and by["nothing frozen"].bytes_per_task == 4 * total
    assert by[f"k={LAYERS}"].trainable == 32 * 2 + 2 == by[f"k={LAYERS}"].bytes_per_task // 4
    assert by["nothing frozen"].trainable > by["k=1"].trainable > by[f"k={LAYERS}"].trainable
    lora = by["LoRA r=8"]  # rank-8 updates on each layer's query and value, and the head
    assert lora.trainable == LAYERS * 2 * 8 * (32 + 32) + 32 * 2 + 2 == lora.bytes_per_task // 4
    assert by["k=1"].lr == study.choices["k=1"].lr and "k=3" not in study.choices  # the head alone: 3b's own runs
    assert len({r.steps for r in study.records}) == 1  # one budget
    assert all(len(group) == 2 for group in study.rows.values())
    table = ablations.partial_freezing_table(study, heads.count_parameters(encoder)["total"])
    assert [row[0] for row in table.rows] == list(by)


def test_the_tactics_differ_only_in_themselves(encoder):
    settings = ablations.tactic_settings(encoder)
    assert list(settings) == ["neither", "warmup only", "layer decay only", "warmup + layer decay",
                              "lower 1 layers frozen"]
    assert settings["neither"] == (dict(warmup_ratio=0.0), None)
    assert settings["warmup only"][0]["warmup_ratio"] == ablations.WARMUP_RATIO
    assert settings["layer decay only"][0] == dict(warmup_ratio=0.0, layer_decay=ablations.LAYER_DECAY)
    assert settings["lower 1 layers frozen"][1] == LAYERS // 2


def test_tactics_and_pretraining_run_at_their_budget_and_every_seed(encoder, profile, tmp_path):
    from ftcourse.experiments import RunStore

    store = RunStore(tmp_path)
    train, validation, dev = toy(16, 0), data.carve_validation(toy(17, 1), 16)[1], toy(8, 2)
    study = ablations.tactics(encoder, train, validation, dev, profile, seeds=(0, 1), store=store)
    assert list(study.rows) == list(ablations.tactic_settings(encoder))
    chosen = study.reference.choices["full fine-tuning"].lr
    assert {r.lr for r in study.records} == {ablations.TACTIC_LR_SCALE * chosen}
    table = ablations.tactics_table(study)
    assert len(table.rows) == 5 and "±" in table.rows[0][1] and table.rows[0][-1] == "(the reference)"
    runs = ablations.pretraining(encoder, train, validation, dev, profile, sizes=(8, 16), seeds=(0, 1), store=store)
    assert list(runs.rows) == ["pretrained, 8", "random init, 8", "pretrained, 16", "random init, 16"]
    assert {r.steps for r in runs.records} == {2}  # 16 / batch 8 = 2 steps; 8 sentences repeat 2 epochs
    assert [r.dev for r in runs.rows["pretrained, 16"]] == [r.dev for r in study.reference.chosen["full fine-tuning"]]
    assert runs.rows["random init, 8"][0].lr == runs.choices["random init"].lr
    assert len(ablations.pretraining_table(runs).rows) == 2
