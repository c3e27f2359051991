"""ftcourse.similarity: pooling, scoring, GloVe averaging and bad input, on tiny models."""

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import similarity
from ftcourse.similarity import SimilarityInputError


class CharTokenizer:
    """A stand-in tokenizer: [CLS]=1, one id per character, padded with 0 to the batch's longest."""

    def __call__(self, sentences, padding=True, truncation=True, max_length=128, return_tensors="pt"):
        ids = [[1] + [2 + ord(c) % 90 for c in s][: max_length - 1] for s in sentences]
        width = max(map(len, ids))
        input_ids = torch.tensor([row + [0] * (width - len(row)) for row in ids])
        from transformers import BatchEncoding

        return BatchEncoding({"input_ids": input_ids, "attention_mask": (input_ids != 0).long()})


@pytest.fixture(scope="module")
def tiny_bert():
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        vocab_size=100)
    return BertModel(config, add_pooling_layer=False).eval(), CharTokenizer()


def test_mean_pooling_ignores_padding():
    states = torch.tensor([[[1.0, 1.0], [3.0, 3.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert similarity.pool(states, mask, "mean").tolist() == [[2.0, 2.0]]
    assert similarity.pool(states, mask, "cls").tolist() == [[1.0, 1.0]]


def test_embedding_does_not_depend_on_batch_padding(tiny_bert):
    model, tokenizer = tiny_bert
    short = "a cat"
    alone = similarity.encode(model, tokenizer, [short], pooling="mean")
    # Batched with a much longer sentence, the short one is padded; its mean must not move.
    batched = similarity.encode(model, tokenizer, [short, "a much longer sentence " * 4], pooling="mean")
    torch.testing.assert_close(alone[0], batched[0], atol=1e-5, rtol=1e-4)


def test_encode_layers_keeps_input_order_and_layers(tiny_bert):
    model, tokenizer = tiny_bert
    sentences = ["a long sentence here", "b", "medium one"]
    out = similarity.encode_layers(model, tokenizer, sentences, layers="all", batch_size=2)
    assert set(out) == {(p, layer) for p in ("cls", "mean") for layer in (0, 1, 2)}
    assert out["mean", 2].shape == (3, 32)
    for i, sentence in enumerate(sentences):  # rows come back in input order, not length order
        torch.testing.assert_close(out["cls", 2][i], similarity.encode(model, tokenizer, [sentence], "cls")[0],
                                   atol=1e-5, rtol=1e-4)
    # layer 0 is the embedding output, and -1 means the last layer
    torch.testing.assert_close(similarity.encode(model, tokenizer, sentences, "mean", layer=-1), out["mean", 2])
    with pytest.raises(SimilarityInputError, match="Layer 5 does not exist"):
        similarity.encode(model, tokenizer, sentences, layer=5)


def test_spearman_and_cosine():
    assert similarity.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(100.0)
    assert similarity.spearman([4, 3, 2, 1], [10, 20, 30, 40]) == pytest.approx(-100.0)
    assert np.isnan(similarity.spearman([0.5, 0.5, 0.5], [1, 2, 3]))
    cos = similarity.cosine_similarity([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]], [[2.0, 0.0], [-1.0, -1.0], [1.0, 0.0]])
    assert cos.tolist() == pytest.approx([1.0, -1.0, 0.0])
    matrix = similarity.cosine_matrix(np.eye(3))
    torch.testing.assert_close(matrix, torch.eye(3))


def test_evaluate_encoder_scores_every_pooling(tiny_bert):
    model, tokenizer = tiny_bert
    s1 = ["a cat sat", "dogs run", "the sun", "rain falls"]
    s2 = ["a cat sat", "dogs ran", "moon light", "xyz"]
    scores = [5.0, 4.0, 1.0, 0.0]
    result = similarity.evaluate_encoder(model, tokenizer, s1, s2, scores, layers=(0, -1))
    assert set(result) == {("cls", 0), ("mean", 0), ("cls", 2), ("mean", 2)}
    assert np.isnan(result["cls", 0])  # [CLS] before any layer is one vector for every sentence
    assert all(-100 <= v <= 100 for key, v in result.items() if key != ("cls", 0))


def test_glove_tokenize_splits_clitics_like_glove():
    assert similarity.glove_tokenize("The woman's dog DOESN'T bark, ok?") == [
        "the", "woman", "'s", "dog", "does", "n't", "bark", "ok"]


def test_glove_average_and_oov_report():
    vectors = similarity.WordVectors(
        index={"the": 0, "cat": 1, "'s": 2},
        vectors=np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32),
    )
    embeddings, report = similarity.glove_embed(["The CAT.", "the zorblax's", "qwerty"], vectors)
    np.testing.assert_allclose(embeddings[0], [0.5, 0.5])  # lowercased; "." is not a word
    np.testing.assert_allclose(embeddings[1], [1.0, 0.5])  # "zorblax" unknown, "'s" known
    np.testing.assert_allclose(embeddings[2], [0.0, 0.0])  # no known word: zero vector
    assert (report.tokens, report.oov_tokens) == (6, 2)
    assert report.oov_words == {"zorblax": 1, "qwerty": 1}
    assert report.sentences_without_known_words == 1
    assert "2 of 6 tokens out of vocabulary" in str(report)


def test_packaged_glove_loads():
    glove = similarity.load_glove()
    assert glove.vectors.shape == (400_000, 50)
    assert glove.index["the"] == 0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: similarity.check_pairs([], []), "sentences1 is empty"),
        (lambda: similarity.check_pairs(["a", "b"], ["c"]), "Mismatched pairs: 2 first sentences but 1"),
        (lambda: similarity.check_pairs(["a"], ["b"], [5.5]), r"outside the stated range 0.0..5.0"),
        (lambda: similarity.check_pairs(["a"], ["b"], [-0.1]), "outside the stated range"),
        (lambda: similarity.check_pairs(["a"], ["b"], [float("nan")]), "outside the stated range"),
        (lambda: similarity.check_pairs(["a"], ["b"], [1.0, 2.0]), "one score per pair"),
        (lambda: similarity.check_sentences("just one string"), "one string"),
        (lambda: similarity.pool(torch.zeros(1, 2, 3), torch.ones(1, 2), "max"), "Unknown pooling 'max'. Known poolings: cls, mean"),
        (lambda: similarity.SiameseConfig(pooling="first"), "Unknown pooling 'first'"),
        (lambda: similarity.glove_embed([]), "sentences is empty"),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(SimilarityInputError, match=message):
        call()


def test_scores_in_a_stated_range_are_accepted():
    _, _, scores = similarity.check_pairs(["a"], ["b"], [0.9], score_range=(0.0, 1.0))
    assert scores.tolist() == [0.9]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random BERT saved with a real WordPiece tokenizer, as sentence-transformers loads it."""
    from transformers import BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + "a the cat dog sat ran on mat sun moon".split()
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        vocab_size=len(words))
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    return str(folder)


def test_sentence_model_matches_raw_pooling_and_evaluator(tiny_model_dir):
    """The untrained siamese network is the raw encoder plus pooling, and sentence-transformers'
    evaluator agrees with this module's own scoring."""
    from transformers import AutoModel, AutoTokenizer

    s1 = ["the cat sat", "a dog ran", "the sun", "the mat", "a moon"]
    s2 = ["the cat sat on the mat", "the dog ran", "the moon", "a cat", "the sun sat"]
    scores = [4.0, 4.5, 2.0, 0.5, 1.0]
    raw = AutoModel.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for pooling in similarity.POOLINGS:
        st = similarity.sentence_model(tiny_model_dir, pooling=pooling, device="cpu")
        ours = similarity.encode(raw, tokenizer, s1, pooling=pooling)
        theirs = st.encode(s1, convert_to_tensor=True)
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
        raw_score = similarity.evaluate_encoder(raw, tokenizer, s1, s2, scores, poolings=(pooling,))[pooling, 2]
        assert similarity.evaluate_sentence_model(st, s1, s2, scores) == pytest.approx(raw_score, abs=1e-3)


def test_train_siamese_moves_the_encoder_and_is_cached(tiny_model_dir, tmp_path):
    pairs = {"sentence1": ["the cat sat", "a dog ran"] * 8, "sentence2": ["the cat sat", "the moon"] * 8,
             "score": [5.0, 0.0] * 8}
    config = similarity.SiameseConfig(pooling="mean", epochs=1, batch_size=8, lr=1e-3, progress=False)
    model, how = similarity.cached_siamese(tiny_model_dir, pairs, config, device="cpu", cache_root=tmp_path)
    assert how == "trained"
    again, how = similarity.cached_siamese(tiny_model_dir, pairs, config, device="cpu", cache_root=tmp_path)
    assert how == "loaded from the cache"
    np.testing.assert_allclose(again.encode(["a cat"]), model.encode(["a cat"]), atol=1e-6)
    other_recipe = similarity.SiameseConfig(pooling="cls", epochs=1, batch_size=8, lr=1e-3, max_steps=1, progress=False)
    assert similarity.siamese_cache_key(tiny_model_dir, pairs, other_recipe) != similarity.siamese_cache_key(
        tiny_model_dir, pairs, config)
    before = similarity.sentence_model(tiny_model_dir, device="cpu")
    after_vec, before_vec = model.encode(["a dog ran"]), before.encode(["a dog ran"])
    assert not np.allclose(after_vec, before_vec)
    with pytest.raises(SimilarityInputError, match="outside the stated range"):
        similarity.train_siamese(tiny_model_dir, {**pairs, "score": [6.0, 0.0] * 8}, config, device="cpu")


def test_comparison_and_layer_tables_are_report_tables():
    table = similarity.comparison_table({"raw [CLS]": 14.03, "GloVe, 50d": 40.0}, {"raw [CLS]": 16.5})
    assert table.rows[0] == ["raw [CLS]", 14.03, 16.5, pytest.approx(-2.47)]
    assert table.rows[1][2:] == [None, None] and "-2.47" in str(table)
    layers = similarity.layer_table({("cls", 0): 1.0, ("mean", 0): 2.0, ("cls", 1): 3.0, ("mean", 1): 4.5}, 1)
    assert [row[0] for row in layers.rows] == ["embeddings", "layer 1"] and "4.50" in str(layers)


def test_pooling_conclusions_are_computed_and_say_where_the_paper_disagrees():
    raw = {("cls", 0): 1.0, ("mean", 0): 30.0, ("cls", 1): 14.0, ("mean", 1): 36.0}
    paper = similarity.published_rows()
    measured = {"raw encoder [CLS]": 14.0, "raw encoder mean": 36.0, "averaged GloVe": 41.0}
    lines = similarity.pooling_conclusions(raw, 41.0, 82.0, {"mean": 57.0, "cls": 55.5}, measured, paper,
                                           siamese_test={"mean": 56.0, "cls": 55.0})
    assert lines[0] == "raw [CLS] is below averaged GloVe (paper: yes): yes"
    assert "weaker trained row (dev) minus raw [CLS] (test): +41.50 points (paper: +70.12)" in lines
    assert "trained mean minus trained [CLS], STS-B dev: +1.50 points (paper, dev: +0.82)" in lines
    assert "the same gap on STS-B test: +1.00 points (the paper gives no test figure for it)" in lines
    assert paper[similarity.trained_row("mean", "dev")] == 87.44 and similarity.trained_row("cls", "test") not in paper
    assert lines[-1] == "more than 10 points from the paper: raw encoder mean, averaged GloVe"
    matrix = np.array([[1.0, 0.9, 0.2], [0.9, 1.0, 0.1], [0.2, 0.1, 1.0]])
    assert similarity.spread_line("m", matrix, [(0, 1)]).endswith("paraphrase pairs average 0.900, all pairs average 0.400")
