"""LoRA via peft: readable errors, saved adapters, one backbone serving many tasks."""

import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import heads, lora


def tiny(seed=0, hidden=32):
    torch.manual_seed(seed)
    config = BertConfig(hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=100, max_position_embeddings=32)
    return BertModel(config, add_pooling_layer=False).eval()


def trained_lookalike(encoder, head, seed):
    """A LoRA task model whose B matrices are non-zero, as after training (B starts at 0)."""
    model = lora.lora_task_model(encoder, head, rank=4)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    return model.eval()


BATCH = {"input_ids": torch.tensor([[2, 5, 7, 9, 3], [2, 8, 4, 3, 0]]),
         "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])}


def test_unknown_target_lists_the_linear_layers():
    with pytest.raises(lora.TargetModulesNotFoundError, match="query.*value") as error:
        lora.add_lora(tiny(), targets=["qkv"])
    assert "'qkv'" in str(error.value) and "dense, key, query, value" in str(error.value)
    assert lora.linear_module_names(tiny()) == ["dense", "key", "query", "value"]


@pytest.mark.parametrize("rank", [0, -2, 1.5])
def test_rank_must_be_positive(rank):
    with pytest.raises(lora.InvalidRankError, match="positive integer"):
        lora.add_lora(tiny(), rank=rank)


def test_only_lora_and_head_train():
    model = lora.lora_task_model(tiny(), heads.SentenceClassifier(32, 2), rank=4)
    counts = heads.count_parameters(model)
    assert counts["trainable"] == 2 * 2 * 4 * (32 + 32) + 32 * 2 + 2


def test_server_serves_each_adapter_as_its_own_model(tmp_path):
    sst = trained_lookalike(tiny(), heads.SentenceClassifier(32, 2), seed=1)
    ner = trained_lookalike(tiny(), heads.TokenTagger(32, 9), seed=2)
    sizes = lora.save_task_adapter(sst, tmp_path / "sst2", "sst2")
    lora.save_task_adapter(ner, tmp_path / "conll", "conll2003")
    assert set(sizes) == {"adapter_model.safetensors", "adapter_config.json", "head.safetensors",
                          "ftcourse_adapter.json"}
    # LoRA tensors in fp32: 2 layers x 2 targets x r(in+out), plus a small safetensors header.
    lora_bytes = 2 * 2 * 4 * 64 * 4
    assert lora_bytes < sizes["adapter_model.safetensors"] < lora_bytes + 4096

    server = lora.AdapterServer(tiny())
    server.load("sst2", tmp_path / "sst2").load("conll", tmp_path / "conll")
    assert server.tasks == ["sst2", "conll"]
    with torch.no_grad():
        for name, own in (("sst2", sst), ("conll", ner)):
            served = server.use(name)(**BATCH)["logits"]
            torch.testing.assert_close(served, own(**BATCH)["logits"])
            reloaded = lora.load_task_adapter(tiny(), tmp_path / ("sst2" if name == "sst2" else "conll"))
            torch.testing.assert_close(served, reloaded(**BATCH)["logits"])
        # The two adapters really differ: switching changes the shared backbone's states.
        server.use("sst2")
        a = server.encoder(**BATCH).last_hidden_state
        server.use("conll")
        assert not torch.allclose(a, server.encoder(**BATCH).last_hidden_state)
    with pytest.raises(lora.LoraSetupError, match="Loaded tasks: sst2, conll"):
        server.use("squad")


def test_adapter_from_another_backbone_is_refused(tmp_path):
    model = trained_lookalike(tiny(seed=0), heads.SentenceClassifier(32, 2), seed=1)
    lora.save_task_adapter(model, tmp_path / "sst2", "sst2")
    with pytest.raises(lora.AdapterBackboneMismatchError, match="trained on the backbone"):
        lora.AdapterServer(tiny(seed=7)).load("sst2", tmp_path / "sst2")
    # Without the course's sidecar, the shapes still give another backbone away.
    (tmp_path / "sst2" / lora.SIDECAR).unlink()
    with pytest.raises(lora.AdapterBackboneMismatchError, match="does not fit"):
        lora.check_adapter_matches(tiny(hidden=48), tmp_path / "sst2")
    with pytest.raises(lora.LoraSetupError, match="not a saved adapter"):
        lora.check_adapter_matches(tiny(), tmp_path)


def test_merged_equals_unmerged():
    model = trained_lookalike(tiny(), heads.SentenceClassifier(32, 2), seed=3)
    result = lora.compare_merged(model, BATCH, repeats=2)
    assert result["max_abs_difference"] < 1e-5
    assert result["merged_seconds"] > 0 and result["unmerged_seconds"] > 0
    assert not hasattr(lora.merged_copy(model).encoder, "peft_config")


def test_the_lessons_inline_lora_equals_peft_s_layer():
    torch.manual_seed(0)
    linear, A, B, x = torch.nn.Linear(12, 10, bias=False), torch.randn(3, 12), torch.randn(10, 3), torch.randn(5, 12)
    ours = linear(x) + (6 / 3) * x @ A.T @ B.T
    assert torch.allclose(lora.lora_layer_output(linear, A, B, 6, x), ours, atol=1e-5)
    assert not torch.allclose(lora.lora_layer_output(linear, A, 2 * B, 6, x), ours, atol=1e-3)  # B matters
    assert torch.equal(lora.lora_layer_output(linear, A, torch.zeros(10, 3), 6, x), linear(x))  # B = 0: W alone
