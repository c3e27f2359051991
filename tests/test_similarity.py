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


def test_spread_line():
    matrix = np.array([[1.0, 0.9, 0.2], [0.9, 1.0, 0.1], [0.2, 0.1, 1.0]])
    assert similarity.spread_line("m", matrix, [(0, 1)]).endswith("paraphrase pairs average 0.900, all pairs average 0.400")


def test_encoder_cosines_are_what_evaluate_encoder_ranks(tiny_bert):
    model, tokenizer = tiny_bert
    s1, s2, scores = ["a cat sat", "dogs run", "the sun", "rain falls"], ["a cat sat", "dogs ran", "moon", "xyz"], [5.0, 4.0, 1.0, 0.0]
    cosines = similarity.encoder_cosines(model, tokenizer, s1, s2, layers=(-1,))
    assert cosines["mean", 2].shape == (4,) and cosines["mean", 2][0] == pytest.approx(1.0, abs=1e-5)  # same sentence
    scored = similarity.evaluate_encoder(model, tokenizer, s1, s2, scores)
    assert {key: similarity.spearman(c, scores) for key, c in cosines.items()} == pytest.approx(scored)


# ----------------------------------------------------------------------------- paired bootstrap


def _predictions(n=600, seed=0):
    """Gold scores on STS-B's scale (with ties) and three predictions: ``good`` and ``good_too``
    equally noisy (independent noise), ``poor`` far noisier."""
    rng = np.random.default_rng(seed)
    gold = np.round(rng.uniform(0, 5, n) * 5) / 5
    return gold, gold + rng.normal(0, 1.0, n), gold + rng.normal(0, 1.0, n), gold + rng.normal(0, 4.0, n)


def test_resampled_spearman_is_spearman_on_each_resample():
    gold, good, _, _ = _predictions(200)
    rows = np.random.default_rng(3).integers(0, 200, size=(4, 200))
    expected = [similarity.spearman(good[r], gold[r]) for r in rows]
    np.testing.assert_allclose(similarity.resampled_spearman(good, gold, rows), expected, rtol=1e-10)


def test_paired_bootstrap_planted_winner_loser_and_ties():
    gold, good, good_too, poor = _predictions()
    win = similarity.paired_bootstrap(good, poor, gold, "good", "poor", "dev", resamples=500)
    assert win.outcome == "beats" and win.low > 0
    assert win.difference == pytest.approx(similarity.spearman(good, gold) - similarity.spearman(poor, gold))
    assert win.verdict.startswith("good beats poor: good - poor = +") and "600 dev pairs resampled 500 times" in win.verdict
    lose = similarity.paired_bootstrap(poor, good, gold, "poor", "good", resamples=500)
    assert lose.outcome == "trails" and lose.verdict.startswith("good beats poor")  # it can fail
    # planted ties: the same prediction twice, and two predictions equally noisy
    same = similarity.paired_bootstrap(good, good.copy(), gold, "good", "again", resamples=500)
    assert same.outcome == "tie" and (same.low, same.high) == (0.0, 0.0) and same.gap_under(3) == "yes"
    # mirrored: each pair twice, a's and b's noise swapped on the copy, so the two predictions differ
    # pair by pair but score the same on the whole split (difference exactly 0)
    mirrored_gold = np.concatenate([gold, gold])
    a, b = np.concatenate([good, good_too]), np.concatenate([good_too, good])
    equal = similarity.paired_bootstrap(a, b, mirrored_gold, "good", "good too", resamples=500)
    assert equal.difference == pytest.approx(0.0, abs=1e-9) and equal.low < 0 < equal.high
    assert equal.outcome == "tie" and equal.verdict.startswith("tie (the pairs do not separate them): good - good too")
    # the same seed draws the same resamples
    assert similarity.paired_bootstrap(good, good_too, gold, resamples=500) == similarity.paired_bootstrap(
        good, good_too, gold, resamples=500)


def test_paired_bootstrap_margins_can_fail_and_stay_unresolved():
    gold, good, good_too, poor = _predictions()
    win = similarity.paired_bootstrap(good, poor, gold, resamples=500)
    assert win.gap_under(3) == "no" and win.above(3) == "yes" and win.above(win.high + 1) == "no"
    assert similarity.paired_bootstrap(poor, good, gold, resamples=500).gap_under(3) == "no"  # either sign
    small = similarity.paired_bootstrap(good[:60], good_too[:60], gold[:60], resamples=500)  # few pairs: wide
    assert small.gap_under(small.high) == "not resolved" and small.above(0) == "not resolved"


def test_paired_bootstrap_refuses_what_cannot_be_compared():
    gold, good, _, _ = _predictions(50)
    with pytest.raises(SimilarityInputError, match="same pairs"):
        similarity.paired_bootstrap(good[:49], good, gold)
    with pytest.raises(SimilarityInputError, match="ranks nothing"):
        similarity.paired_bootstrap(np.ones(50), good, gold)


# ----------------------------------------------------------------------------- lesson 4's conclusions


def _lesson4_run(cls_extra=0.05, glove_noise=1.5, n=500, seed=0):
    """Per-pair cosines as lesson 4 collects them, planted: raw [CLS] poor, raw mean fair, GloVe
    ``glove_noise``, Sentence-BERT and the mean-trained model good; the [CLS]-trained model is the
    mean-trained one with ``cls_extra`` more noise (0.05: the same model, all but)."""
    rng = np.random.default_rng(seed)
    gold = {split: np.round(rng.uniform(0, 5, n) * 5) / 5 for split in ("dev", "test")}

    def noisy(split, sd):
        return gold[split] + rng.normal(0, sd, n)

    raw = {("cls", 0): np.ones(n), ("mean", 0): noisy("test", 4.0), ("cls", 1): noisy("test", 8.0),
           ("mean", 1): noisy("test", 3.0)}
    trained = {split: {"mean": noisy(split, 1.0)} for split in ("dev", "test")}
    for split in trained:
        trained[split]["cls"] = trained[split]["mean"] + rng.normal(0, cls_extra, n)
    glove, sbert = noisy("test", glove_noise), noisy("test", 0.5)
    measured = {"raw encoder [CLS]": similarity.spearman(raw["cls", 1], gold["test"]),
                "raw encoder mean": similarity.spearman(raw["mean", 1], gold["test"]),
                "averaged GloVe": similarity.spearman(glove, gold["test"])}
    return raw, glove, sbert, trained, gold, measured


def _conclusions(*run, **kwargs):
    return similarity.pooling_conclusions(*run, similarity.published_rows(), resamples=300, **kwargs)


def test_pooling_conclusions_compare_dev_with_dev_and_test_with_test():
    raw, glove, sbert, trained, gold, measured = run = _lesson4_run()
    lines = _conclusions(*run)
    assert lines[0].startswith("raw [CLS] is below averaged GloVe (paper: yes): yes; averaged GloVe - raw [CLS] = +")
    assert "500 test pairs resampled" in lines[0]
    assert lines[1].startswith("raw mean beats raw [CLS] (paper: yes): yes")
    assert lines[2].startswith("raw mean is below averaged GloVe (paper: yes): yes")
    assert lines[3].startswith("the Sentence-BERT model beats the raw encoder's best reading (raw mean, layer 1) "
                               "(paper: yes): yes")
    # the lift is on test for both sides: the paper's Table 2 (test) over Table 1 (test), never Table 6 (dev)
    assert lines[4].startswith("siamese training with mean pooling lifts STS-B test more than 10 points above raw "
                               "[CLS] (the paper, test: SBERT-STSb-base, Table 2, minus BERT [CLS], Table 1: +68.17 "
                               "points): yes")
    assert "(the paper has no test figure for a [CLS]-trained model): yes" in lines[5]
    dev_gap = similarity.spearman(trained["dev"]["mean"], gold["dev"]) - similarity.spearman(trained["dev"]["cls"], gold["dev"])
    test_gap = similarity.spearman(trained["test"]["mean"], gold["test"]) - similarity.spearman(trained["test"]["cls"], gold["test"])
    gap_line = next(line for line in lines if line.startswith("pooling gap after training (trained mean"))
    assert f"STS-B dev: the paper (Table 6): +0.82 points; this run: {dev_gap:+.2f} points (95% CI" in gap_line
    assert "500 dev pairs resampled" in gap_line
    test_line = next(line for line in lines if line.startswith("pooling gap after training, STS-B test"))
    assert f"this run: {test_gap:+.2f} points" in test_line and "the paper gives no test figure" in test_line
    assert "after training, the pooling matters little (gap under 3 points), STS-B dev (paper: yes): yes" in lines
    assert not any(line.startswith(("disagrees", "does not reproduce")) for line in lines)
    assert lines[-1].startswith("more than 10 points from the paper: ")
    # no line sets a figure on one split against a figure on the other
    assert not any("(dev) minus" in line or "(test) minus" in line for line in lines)


def test_pooling_conclusions_say_so_when_the_pooling_matters():
    """Planted: the [CLS]-trained model far noisier than the mean-trained one, as lesson 4's
    offline run found on dev. The verdict must say no, give both figures and a likely reason."""
    lines = _conclusions(*_lesson4_run(cls_extra=3.0), why="a planted reason")
    assert "after training, the pooling matters little (gap under 3 points), STS-B dev (paper: yes): no" in lines
    (disagrees,) = [line for line in lines if line.startswith("disagrees with the paper")]
    assert disagrees.startswith("disagrees with the paper: after training, the pooling matters little (gap under 3 "
                                "points), STS-B dev: the paper yes, this run no (the paper: +0.82 points; this run: +")
    assert disagrees.endswith("Likely reason: a planted reason")


def test_pooling_conclusions_say_so_when_raw_beats_glove_or_the_noise_decides_nothing():
    lines = _conclusions(*_lesson4_run(glove_noise=20.0))  # GloVe planted as bad as noise
    assert lines[0].startswith("raw [CLS] is below averaged GloVe (paper: yes): no; averaged GloVe - raw [CLS] = -")
    assert lines[2].startswith("raw mean is below averaged GloVe (paper: yes): no")
    assert "disagrees with the paper: raw mean is below averaged GloVe: the paper yes, this run no" in lines
    # a pooling gap the pairs cannot resolve: few pairs, the [CLS]-trained model a little noisier
    few = _conclusions(*_lesson4_run(cls_extra=1.0, n=40))
    assert any(line.startswith("after training, the pooling matters little (gap under 3 points), STS-B dev "
                               "(paper: yes): not resolved") for line in few)
    (unresolved,) = [line for line in few if line.startswith("does not reproduce the paper (within the noise): after")]
    assert "this run not resolved (the paper: +0.82 points; this run: +" in unresolved
    assert "the 40 dev pairs do not resolve a gap this size (95% CI" in unresolved and "Likely reason" not in unresolved


def test_published_rows_sit_on_the_papers_split():
    paper = similarity.published_rows()
    assert paper[similarity.trained_row("mean", "dev")] == 87.44 and similarity.trained_row("cls", "test") not in paper
    assert similarity.trained_row("mean", "test") not in paper
