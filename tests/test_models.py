import pytest
from transformers import BertConfig

from ftcourse import config, models


def test_architecture_is_bert_base():
    cfg = models.architecture_config()
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (12, 768, 30522)


def test_offline_sentence_model_is_packaged():
    source = models.model_source("sentence", "offline")
    assert source == str(models.packaged_sentence_model_dir())
    tok = models.load_tokenizer("sentence", "offline")
    assert tok("hello world")["input_ids"][0] == tok.cls_token_id


def test_offline_encoder_is_the_packaged_minilm_backbone():
    assert models.model_source("encoder", "offline") == str(models.packaged_sentence_model_dir())
    encoder = models.load_encoder("offline", add_pooling_layer=False)
    assert encoder.config.model_type == "bert"
    assert (encoder.config.num_hidden_layers, encoder.config.hidden_size, encoder.config.vocab_size) == (6, 384, 30522)


def test_offline_raw_encoder_is_the_course_encoder(recwarn):
    encoder = models.load_raw_encoder("offline", add_pooling_layer=False)
    assert encoder.config.model_type == "bert"
    assert encoder.config.vocab_size == 30522
    if models.course_encoder_available():
        assert models.model_source("raw_encoder", "offline") == str(config.COURSE_ENCODER_DIR)


def test_paper_profile_adapts_and_reads_bert_base():
    assert models.model_source("encoder", "paper") == models.model_source("raw_encoder", "paper") == "bert-base-uncased"


def test_load_encoder_refuses_a_non_encoder_role():
    with pytest.raises(models.UnknownRoleError, match="raw_encoder"):
        models.load_encoder(role="sentence")


def test_raw_encoder_override_is_read_by_setup(monkeypatch, tmp_path):
    from ftcourse import session

    monkeypatch.setenv("FTCOURSE_RAW_ENCODER", str(tmp_path))
    assert models.model_source("raw_encoder") != str(tmp_path)  # read at setup(), not on every call
    profile = session.setup("offline", verbose=False)
    assert models.model_source("raw_encoder", profile) == models.model_source("raw_encoder") == str(tmp_path)
    assert models.model_source("encoder", profile) != str(tmp_path)
    assert models.model_source("raw_encoder", "offline") != str(tmp_path)  # a name is the built-in profile


def test_unknown_role():
    with pytest.raises(models.UnknownRoleError, match="Known roles"):
        models.model_source("decoder")


def test_paper_profile_offline_miss_is_clear(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelNotAvailableError, match=r"(?s)bert-base-uncased.*go online.*FTCOURSE_ENCODER"):
        models.load_encoder("paper")


def test_override_with_a_missing_local_folder(monkeypatch, tmp_path):
    from ftcourse import session

    monkeypatch.setenv("FTCOURSE_ENCODER", str(tmp_path))
    session.setup(verbose=False)
    with pytest.raises(models.ModelNotAvailableError, match="local folder"):
        models.load_encoder()


def test_describe_hides_machine_paths():
    for source in models.describe("offline").values():
        assert not source.startswith("/"), source


def test_fingerprint_names_the_weights_not_the_wrapper(tiny_bert, tmp_path):
    import torch

    from ftcourse import lora

    before = models.fingerprint(tiny_bert)
    assert models.fingerprint(tiny_bert) == before  # deterministic
    wrapped = lora.add_lora(tiny_bert, rank=2, targets=("query", "value"))
    assert models.fingerprint(wrapped) == before  # LoRA's own matrices are not the backbone
    with torch.no_grad():
        next(p for n, p in wrapped.named_parameters() if "word_embeddings" in n).flatten()[0] += 1.0
    assert models.fingerprint(wrapped) != before  # the backbone moved: another encoder


def test_fingerprint_of_a_saved_folder_is_stable(tiny_bert, tmp_path):
    tiny_bert.save_pretrained(tmp_path)
    assert models.fingerprint(tmp_path) == models.fingerprint(str(tmp_path))
    with pytest.raises(models.ModelNotAvailableError, match="No \\*.safetensors"):
        models.fingerprint(tmp_path / "missing")
