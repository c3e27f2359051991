import math

import datasets
import pytest
import torch

from ftcourse import heads, training


def test_bucketed_batches_cover_every_example_once():
    lengths = [5, 50, 7, 49, 6, 48, 8, 47] * 10
    batches = training.length_bucketed_batches(lengths, 8, shuffle=True, seed=0, bucket_factor=10)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    spread = max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    assert spread <= 3  # sorted pools put similar lengths together
    assert training.length_bucketed_batches(lengths, 8, True, seed=0) == training.length_bucketed_batches(lengths, 8, True, seed=0)


def test_collate_pads_ids_and_token_labels():
    batch = training.collate(
        [{"input_ids": [101, 7, 102], "attention_mask": [1, 1, 1], "labels": [-100, 2, -100]},
         {"input_ids": [101, 102], "attention_mask": [1, 1], "labels": [-100, -100]}],
        pad_token_id=0,
    )
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 0]]
    assert batch["labels"].tolist()[1] == [-100, -100, -100]
    spans = training.collate([{"input_ids": [1, 2, 3, 4], "labels": [1, 2]}])
    assert spans["labels"].shape == (1, 2)


def test_layer_decay_and_no_decay_groups(tiny_bert):
    model = heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2))
    groups = training.parameter_groups(model, training.TrainConfig(lr=1e-3, layer_decay=0.5))
    by_name = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in groups:
        for p in group["params"]:
            by_name[names[id(p)]] = group
    assert by_name["head.classifier.weight"]["lr"] == pytest.approx(1e-3)
    assert by_name["encoder.encoder.layer.1.output.dense.weight"]["lr"] == pytest.approx(5e-4)
    assert by_name["encoder.embeddings.word_embeddings.weight"]["lr"] == pytest.approx(1e-3 * 0.5**3)
    assert by_name["encoder.encoder.layer.0.output.LayerNorm.weight"]["weight_decay"] == 0.0
    assert by_name["head.classifier.weight"]["weight_decay"] == 0.01


def test_bad_configs():
    with pytest.raises(ValueError, match="warmup_ratio"):
        training.TrainConfig(warmup_ratio=1.5)
    with pytest.raises(ValueError, match="positive"):
        training.TrainConfig(lr=0)


def _toy_task(tokenizer, n=64):
    words = ["good", "bad"]
    sentences = [f"this is {words[i % 2]}" for i in range(n)]
    data = datasets.Dataset.from_dict({"sentence": sentences, "labels": [1 - i % 2 for i in range(n)]})
    return data.map(lambda b: tokenizer(b["sentence"]), batched=True)


def test_training_learns_a_trivial_task_and_is_reproducible(tiny_bert, tokenizer):
    data = _toy_task(tokenizer)
    config = training.TrainConfig(lr=3e-3, epochs=6, batch_size=16, progress=False, warmup_ratio=0.0)

    def run():
        torch.manual_seed(0)
        model = heads.TaskModel(tiny_bert.__class__(tiny_bert.config, add_pooling_layer=False), heads.SentenceClassifier(32, 2))
        history = training.train(model, data, config, eval_data=data, metric=training.accuracy)
        return history

    first, second = run(), run()
    assert first.metrics[-1]["accuracy"] == 1.0
    assert first.losses == second.losses
    assert first.examples_seen == 6 * 64
    assert len(first.learning_rates) == 6 * 4


def test_frozen_training_leaves_the_encoder_unchanged(tiny_bert, tokenizer):
    data = _toy_task(tokenizer, 32)
    model = heads.set_regime(heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2)), "frozen")
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    training.train(model, data, training.TrainConfig(lr=1e-2, progress=False))
    assert all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
    with pytest.raises(ValueError, match="no trainable parameters"):
        for p in model.parameters():
            p.requires_grad = False
        training.train(model, data, training.TrainConfig(progress=False))


def test_empty_dataset_is_an_error(tiny_bert):
    empty = datasets.Dataset.from_dict({"input_ids": [], "labels": []})
    with pytest.raises(ValueError, match="empty"):
        training.make_loader(empty, 8, shuffle=True)


def test_predict_keeps_dataset_order(tiny_bert, tokenizer):
    data = _toy_task(tokenizer, 10).map(lambda row, i: {"input_ids": row["input_ids"] + [1012] * (i % 4)}, with_indices=True)
    data = data.remove_columns(["attention_mask", "token_type_ids"])
    model = heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2))
    logits, labels = training.predict(model, data, batch_size=3)
    assert [int(label) for label in labels] == data["labels"]


def test_peak_memory_of_a_run_after_a_bigger_one():
    # The allocator keeps what the first block freed; the second block's peak must still show.
    def allocate(floats):
        blocks = [torch.ones(floats) for _ in range(10)]
        return sum(b[0].item() for b in blocks)

    for _ in range(2):  # freeing mmap'ed blocks raises glibc's mmap threshold: later ones stay in the heap
        with training.peak_memory() as big:
            allocate(4_000_000)
    with training.peak_memory() as small:
        allocate(2_000_000)
    expected = 10 * 2_000_000 * 4
    assert big["bytes"] >= 1.5 * expected
    assert 0.8 * expected <= small["bytes"] <= 1.5 * expected


def test_native_bf16_is_read_from_the_cpu_flags_never_assumed():
    assert training.cpu_has_native_bf16("processor: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
    assert training.cpu_has_native_bf16("flags : fpu amx_bf16 amx_tile\n")
    assert not training.cpu_has_native_bf16("flags : fpu sse2 avx avx2 fma\n")  # bf16 would be emulated
    assert not training.cpu_has_native_bf16("")


def test_auto_precision_follows_the_hardware_and_fp16_is_refused_on_a_cpu(monkeypatch):
    monkeypatch.setattr(training, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    assert training.autocast_precision("auto", "cpu") == "fp32"
    monkeypatch.setattr(training, "cpu_has_native_bf16", lambda cpuinfo=None: True)
    assert training.autocast_precision("auto", "cpu") == "bf16"
    assert training.autocast_precision("fp32", "cpu") == "fp32"
    with pytest.raises(ValueError, match="fp16 autocast has no fast path on a CPU"):
        training.autocast_precision("fp16", "cpu")
    with pytest.raises(ValueError, match="Unknown precision 'half'"):
        training.TrainConfig(precision="half")


def test_bf16_training_runs_under_autocast_with_fp32_weights(tiny_bert, tokenizer):
    data = _toy_task(tokenizer)
    model = heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2))
    config = training.TrainConfig(lr=3e-3, epochs=2, batch_size=16, progress=False, precision="bf16")
    history = training.train(model, data, config, eval_data=data, metric=training.accuracy)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast, not a cast of the weights
    assert len(history.losses) == 8 and all(math.isfinite(loss) for loss in history.losses)
    logits, _ = training.predict(model, data, precision="bf16")
    assert logits[0].dtype == torch.float32  # predictions come back as fp32 whatever the autocast


def test_each_addition_to_the_texts_loop_has_a_switch(tiny_bert, tokenizer):
    """Lesson 1 turns the package's additions on one at a time: each switch must do what it says."""
    with pytest.raises(ValueError, match="Unknown schedule 'cosine'"):
        training.TrainConfig(schedule="cosine")
    model = heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2))
    # No weight-decay exemptions: every group decays.
    groups = training.parameter_groups(model, training.TrainConfig(decay_exemptions=False))
    assert {g["weight_decay"] for g in groups} == {0.01}
    # torch's per-tensor AdamW computes the fused kernel's update.
    updated = []
    for fused in (True, False):
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(8, 8))
        optimizer = training.adamw([{"params": [weight], "weight_decay": 0.01}], 1e-2, "cpu", fused=fused)
        assert bool(optimizer.defaults.get("fused")) == fused
        weight.grad = torch.ones_like(weight)
        optimizer.step()
        updated.append(weight.detach().clone())
    assert torch.allclose(updated[0], updated[1], atol=1e-6)
    # Plain shuffled batches carry more padding than length-bucketed ones over the same examples.
    lengths = [4, 40] * 32
    data = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in lengths], "labels": [0] * len(lengths)})

    def padded_tokens(bucketing):
        loader = training.make_loader(data, 8, shuffle=True, seed=0, length_bucketing=bucketing)
        return sum(b["input_ids"].numel() for b in loader)

    assert padded_tokens(True) == sum(lengths) < padded_tokens(False)
    # A constant schedule keeps the lr at every step; the default warms up, then decays to zero.
    toy = _toy_task(tokenizer, 32)
    flat = training.train(model, toy, training.TrainConfig(lr=1e-3, epochs=2, batch_size=8, schedule="constant",
                                                          progress=False))
    assert flat.learning_rates == [pytest.approx(1e-3)] * 8
    linear = training.train(model, toy, training.TrainConfig(lr=1e-3, epochs=2, batch_size=8, progress=False))
    assert linear.learning_rates[0] < 1e-3 and linear.learning_rates[-1] == 0.0


def test_evaluating_between_epochs_leaves_the_training_unchanged(tiny_bert, tokenizer):
    """predict must not draw from torch's global generator: dropout after it would change."""
    data = _toy_task(tokenizer, 32)
    config = training.TrainConfig(lr=1e-3, epochs=2, batch_size=8, progress=False)

    def run(evaluate):
        torch.manual_seed(0)
        model = heads.TaskModel(tiny_bert.__class__(tiny_bert.config, add_pooling_layer=False), heads.SentenceClassifier(32, 2))
        return training.train(model, data, config, eval_data=data if evaluate else None,
                              metric=training.accuracy if evaluate else None).losses

    assert run(evaluate=True) == run(evaluate=False)
    model = heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2))
    state = torch.random.get_rng_state()
    training.predict(model, data)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_one_at_a_time_trains_the_base_then_each_change_alone(tiny_bert, tokenizer):
    from ftcourse import report

    data = _toy_task(tokenizer, 32)
    base = training.TrainConfig(lr=1e-3, epochs=1, batch_size=8, schedule="constant", progress=False)

    def fresh():
        torch.manual_seed(0)
        return heads.TaskModel(tiny_bert.__class__(tiny_bert.config, add_pooling_layer=False), heads.SentenceClassifier(32, 2))

    results = training.one_at_a_time(fresh, data, data, base, {"linear": dict(schedule="linear"), "same": {}})
    assert list(results) == ["base", "linear", "same"]
    assert results["same"][0] == results["base"][0]  # the same config reproduces its accuracy
    assert all(0 <= acc <= 1 and seconds > 0 for acc, seconds in results.values())
    table = report.against_first(results, "run")
    assert [row[0] for row in table.rows] == ["base", "linear", "same"] and table.rows[0][2] == 0.0 and table.rows[0][4] == 1.0
    model = fresh()
    assert training.adamw_step_seconds(model, base, fused=True) > 0
    assert all(p.grad is None for p in model.parameters())
