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


def test_partial_freezing_trains_less_and_stores_only_what_it_trained(encoder, profile):
    train, dev = toy(32, 0), toy(16, 1)
    runs = ablations.partial_freezing(encoder, train, dev, profile, ks=(1, LAYERS), seeds=(0,), lora_rank=4, lora_lr=5e-3)
    by = {r.setting: r for r in runs}
    assert list(by) == ["nothing frozen", "k=1", f"k={LAYERS}", "LoRA r=4"]
    total = heads.count_parameters(encoder)["total"] + 32 * 2 + 2
    assert by["nothing frozen"].trainable == total and by["nothing frozen"].bytes_per_task == 4 * total
    assert by[f"k={LAYERS}"].trainable == 32 * 2 + 2 == by[f"k={LAYERS}"].bytes_per_task // 4
    assert by["nothing frozen"].trainable > by["k=1"].trainable > by[f"k={LAYERS}"].trainable
    # LoRA: rank-4 updates on each layer's query and value (4 x (32 + 32) each), and the head, at its own lr.
    lora = by["LoRA r=4"]
    assert lora.trainable == LAYERS * 2 * 4 * (32 + 32) + 32 * 2 + 2 == lora.bytes_per_task // 4 and lora.lr == 5e-3
    assert "LoRA r=4" in "\n".join(ablations.verdicts(runs, ablations.tactics(encoder, toy(16, 0), toy(8, 1), profile),
                                                      ablations.pretraining(encoder, train, dev, profile, sizes=(8,),
                                                                            seeds=(0,))))
    assert [r.setting for r in ablations.partial_freezing(encoder, train, dev, profile, ks=(), lora_rank=0)] == \
        ["nothing frozen"]
    assert len({r.steps for r in runs}) == 1  # one budget
    assert all(0 <= r.accuracy <= 1 and r.scored_on == "dev" for r in runs)
    table = ablations.partial_freezing_table(runs, heads.count_parameters(encoder)["total"])
    assert [row[0] for row in table.rows] == list(by)


def test_the_tactics_differ_only_in_themselves(encoder):
    settings = ablations.tactic_settings(encoder)
    assert list(settings) == ["neither", "warmup only", "layer decay only", "warmup + layer decay",
                              "lower 1 layers frozen"]
    assert settings["neither"] == (dict(warmup_ratio=0.0), None)
    assert settings["warmup only"][0]["warmup_ratio"] == ablations.WARMUP_RATIO
    assert settings["layer decay only"][0] == dict(warmup_ratio=0.0, layer_decay=ablations.LAYER_DECAY)
    assert settings["lower 1 layers frozen"][1] == LAYERS // 2


def test_tactics_run_at_the_scaled_lr_and_every_seed(encoder, profile):
    runs = ablations.tactics(encoder, toy(16, 0), toy(8, 1), profile, seeds=(0, 1))
    assert len(runs) == 2 * len(ablations.tactic_settings(encoder))
    assert {r.lr for r in runs} == {ablations.TACTIC_LR_SCALE * profile.finetune_lr}
    table = ablations.tactics_table(runs)
    assert len(table.rows) == 5 and "±" in table.rows[0][1]


def test_pretraining_gives_every_size_the_same_steps_and_reuses_a_run(encoder, profile):
    pool, dev = toy(32, 0), toy(8, 1)
    earlier = ablations.partial_freezing(encoder, pool, dev, profile, ks=(), seeds=(0,))
    runs = ablations.pretraining(encoder, pool, dev, profile, sizes=(8, 32), seeds=(0,), reuse=earlier)
    assert [(r.train_size, r.setting) for r in runs] == [(8, "pretrained"), (8, "random init"),
                                                         (32, "pretrained"), (32, "random init")]
    assert {r.steps for r in runs} == {4}  # 32 / batch 8 = 4 steps; 8 sentences repeat 4 epochs
    assert runs[2].accuracy == earlier[0].accuracy and runs[2].study == "pretraining"
    assert len(ablations.pretraining_table(runs).rows) == 2


def test_choose_lr_scores_on_validation_and_keeps_the_best(encoder, profile):
    validation = data.carve_validation(toy(9, 1), 8)[1]  # a chooser reads only a carved part
    lr, runs = ablations.choose_lr(lambda: copy.deepcopy(encoder), toy(16, 0), validation, (1e-4, 1e-3), profile)
    assert [r.lr for r in runs] == [1e-4, 1e-3] and {r.scored_on for r in runs} == {"validation"}
    assert lr == max(runs, key=lambda r: r.accuracy).lr


def _run(study, setting, accuracy, seed=0, seconds=1.0, k=None, size=100, trainable=10):
    return ablations.AblationRun(study, setting, seed, size, accuracy, trainable, 4 * trainable, seconds, 10, 1e-4, k)


def test_verdicts_read_the_runs():
    freezing = [_run("f", "nothing frozen", 0.80, seconds=10), _run("f", "k=0", 0.80, seconds=9, k=0),
                _run("f", "k=3", 0.79, seconds=6, k=3), _run("f", "k=6", 0.70, seconds=3, k=6)]
    tactic = [_run("t", name, acc, seed=s) for name, base in (("neither", 0.60), ("warmup only", 0.75))
              for s, acc in enumerate((base, base + 0.01, base - 0.01))]
    pretraining = [_run("p", "pretrained", 0.70, size=64), _run("p", "random init", 0.50, size=64),
                   _run("p", "pretrained", 0.80, size=600), _run("p", "random init", 0.55, size=600)]
    lines = ablations.verdicts(freezing, tactic, pretraining)
    assert lines[0].startswith("the head alone (k=6) is the cheapest") and lines[0].endswith("agrees")
    assert "agrees" in lines[1]
    assert lines[2].startswith("between the extremes: k=0, 3 of k=0, 3 stay within") and "deepest, k=3" in lines[2]
    assert "warmup only does the most work" in lines[3]
    assert "(+20.0 points)" in lines[4] and lines[4].endswith("agrees")
    slower = [*freezing[:3], _run("f", "k=6", 0.70, seconds=12, k=6)]
    assert "DISAGREES" in ablations.verdicts(slower, tactic, pretraining)[1]
    flat = [_run("p", "pretrained", 0.52, size=64), _run("p", "random init", 0.50, size=64)]
    assert ablations.verdicts(freezing, tactic, flat)[-1].endswith("DISAGREES")
