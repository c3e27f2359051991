"""The paper profile's code path, proven without the hub.

Stand-ins for bert-base-uncased and SBERT-NLI-base (random weights, the real architectures
and repository layouts, under the real ids) sit in a Hugging Face cache made offline
(``paper_hub`` in conftest.py, ``tests/paper_cache.py``). The models then resolve through
the libraries' normal hub code path, as after a real download.
"""

from __future__ import annotations

import os

import pytest

from ftcourse import config, models

pytestmark = pytest.mark.paper

BERT_BASE_BACKBONE = 109_482_240  # with its pooler (published.BERT_BASE["parameters"])
POOLER = 768 * 768 + 768


def test_paper_models_resolve_through_the_hub_cache(paper_hub, monkeypatch):
    from huggingface_hub import constants, try_to_load_from_cache

    # The hub's own cache lookup finds the stand-ins under the real ids...
    assert constants.HF_HUB_OFFLINE and constants.HF_HUB_CACHE == str(paper_hub)
    assert os.path.isfile(try_to_load_from_cache("bert-base-uncased", "model.safetensors"))
    # ...and ftcourse takes no local-folder shortcut to them: the profile's ids are hub ids.
    for role in ("encoder", "raw_encoder", "sentence"):
        source = models.model_source(role, "paper")
        assert not models.is_local(source), source
    assert models.describe("paper")["sentence"] == "sentence-transformers/bert-base-nli-mean-tokens"

    encoder = models.load_encoder("paper", add_pooling_layer=False)
    raw = models.load_raw_encoder("paper")
    assert (encoder.config.num_hidden_layers, encoder.config.hidden_size, encoder.config.vocab_size) == (12, 768, 30522)
    assert sum(p.numel() for p in raw.parameters()) == BERT_BASE_BACKBONE
    assert sum(p.numel() for p in encoder.parameters()) == BERT_BASE_BACKBONE - POOLER
    # The checkpoint's "bert." prefix was stripped: the weights loaded are the saved ones.
    assert models.fingerprint(raw) == models.fingerprint(models.load_raw_encoder("paper"))

    tokenizer = models.load_tokenizer("encoder", "paper")
    assert tokenizer.model_max_length == 512
    assert tokenizer.convert_ids_to_tokens(tokenizer("Hello, World")["input_ids"]) == [
        "[CLS]", "hello", ",", "world", "[SEP]"]  # uncased WordPiece

    sbert = models.load_sentence_model("paper", device="cpu")
    assert sbert[1].pooling_mode == "mean" and sbert.get_sentence_embedding_dimension() == 768
    assert sbert[0].auto_model.config.num_hidden_layers == 12
    assert tuple(sbert.encode(["A man plays a guitar."]).shape) == (1, 768)


@pytest.mark.parametrize("role, loader, variable", [
    ("encoder", lambda profile: models.load_encoder(profile), "FTCOURSE_ENCODER"),
    ("raw_encoder", lambda profile: models.load_raw_encoder(profile), "FTCOURSE_RAW_ENCODER"),
    ("sentence", lambda profile: models.load_sentence_model(profile, device="cpu"), "FTCOURSE_SENTENCE"),
])
def test_an_id_missing_from_the_offline_cache_is_a_clear_error(paper_hub, role, loader, variable):
    missing = "google/bert_uncased_L-2_H-128_A-2"
    profile = config.PROFILES["paper"].with_(**{role: missing})
    with pytest.raises(models.ModelNotAvailableError) as error:
        loader(profile)
    message = str(error.value)
    assert f"{missing!r} is missing from the cache at {paper_hub}" in message
    assert "HF_HUB_OFFLINE is set" in message
    assert "Fix: go online once" in message and f"hf download {missing}" in message
    assert variable in message


def test_tokenizer_missing_from_the_offline_cache_is_a_clear_error(paper_hub):
    profile = config.PROFILES["paper"].with_(encoder="nobody/no-such-model")
    with pytest.raises(models.ModelNotAvailableError, match=r"(?s)'nobody/no-such-model' is missing from the cache.*Fix"):
        models.load_tokenizer("encoder", profile)
