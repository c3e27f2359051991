import pytest
import torch

from ftcourse import heads


def test_four_head_shapes(tiny_bert, tokenizer):
    batch = tokenizer(["a short one", "and a somewhat longer sentence here"], padding=True, return_tensors="pt")
    seq = batch["input_ids"].shape[1]
    hidden = tiny_bert.config.hidden_size
    sentence = heads.TaskModel(tiny_bert, heads.SentenceClassifier(hidden, 2))
    assert sentence(**batch)["logits"].shape == (2, 2)
    tagger = heads.TaskModel(tiny_bert, heads.TokenTagger(hidden, 9))
    assert tagger(**batch)["logits"].shape == (2, seq, 9)
    span = heads.TaskModel(tiny_bert, heads.SpanExtractor(hidden))
    assert span(**batch)["logits"].shape == (2, 2, seq)
    pair = tokenizer(["a man plays"], ["a woman sings"], return_tensors="pt")
    assert pair["token_type_ids"].tolist()[0] == [0] * 5 + [1] * 4  # [CLS] a man plays [SEP] | a woman sings [SEP]
    regression = heads.TaskModel(tiny_bert, heads.PairClassifier(hidden, 1))
    out = regression(**pair, labels=torch.tensor([3.0]))
    assert out["logits"].shape == (1, 1) and out["loss"].ndim == 0


def test_regimes_freeze_only_the_encoder(tiny_bert):
    model = heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2))
    encoder_params = sum(p.numel() for p in tiny_bert.parameters())
    heads.set_regime(model, "frozen")
    counts = heads.count_parameters(model)
    assert counts["trainable"] == 32 * 2 + 2
    assert counts["frozen"] == encoder_params
    heads.set_regime(model, "finetune")
    assert heads.count_parameters(model)["trainable"] == encoder_params + 66
    with pytest.raises(ValueError, match="Known regimes"):
        heads.set_regime(model, "half")


def test_frozen_encoder_gets_no_gradient(tiny_bert, tokenizer):
    model = heads.set_regime(heads.TaskModel(tiny_bert, heads.SentenceClassifier(32, 2)), "frozen")
    batch = tokenizer(["good film"], return_tensors="pt")
    model(**batch, labels=torch.tensor([1]))["loss"].backward()
    assert all(p.grad is None for p in model.encoder.parameters())
    assert model.head.classifier.weight.grad is not None


def test_first_subtoken_alignment(tokenizer):
    encoded = heads.tokenize_for_tagging(tokenizer, [["Schwarzenegger", "rejects", "EU"]], [[1, 0, 3]])
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    labels = encoded["labels"][0]
    assert tokens[0] == "[CLS]" and labels[0] == heads.IGNORE_INDEX
    kept = [(t, l) for t, l in zip(tokens, labels) if l != heads.IGNORE_INDEX]
    assert [l for _, l in kept] == [1, 0, 3]
    assert len(tokens) > 5  # "schwarzenegger" splits into several subtokens
    assert all(not t.startswith("##") for t, _ in kept)


def test_mismatched_labels_are_an_error(tokenizer):
    with pytest.raises(ValueError, match="3 words but 2 labels"):
        heads.tokenize_for_tagging(tokenizer, [["a", "b", "c"]], [[0, 0]])
    with pytest.raises(ValueError, match="1 sentences but 2 label lists"):
        heads.tokenize_for_tagging(tokenizer, [["a"]], [[0], [0]])
