"""Feature readouts: extraction and its cache, the readouts, the heads, scoring, bad input."""

import datasets
import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import config, data, published, readout, speed

PROFILE = config.get_profile("offline")


def tiny_conll(n=12, seed=0):
    """A few CoNLL-shaped sentences with a learnable rule: capitalised words are B-PER."""
    generator = torch.Generator().manual_seed(seed)
    vocabulary = ["the", "a", "Paris", "John", "met", "in", "saw", "Mary", "London", "today", "unbelievably"]
    tokens, tags = [], []
    for _ in range(n):
        length = int(torch.randint(2, 9, (1,), generator=generator))
        words = [vocabulary[int(i)] for i in torch.randint(len(vocabulary), (length,), generator=generator)]
        tokens.append(words)
        tags.append([1 if w[0].isupper() else 0 for w in words])
    features = datasets.Features({
        "tokens": datasets.Sequence(datasets.Value("string")),
        "ner_tags": datasets.Sequence(datasets.ClassLabel(names=data.CONLL_LABELS)),
    })
    return datasets.Dataset.from_dict({"tokens": tokens, "ner_tags": tags}, features=features)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FTCOURSE_CACHE", str(tmp_path))
    return tmp_path


def other_bert(seed):
    torch.manual_seed(seed)
    config_ = BertConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=128)
    return BertModel(config_, add_pooling_layer=False)


# ----------------------------------------------------------------------------- readouts


def test_paper_readouts_are_the_published_rows():
    assert set(readout.PAPER_READOUTS) | {"finetune"} == set(published.BERT_FEATURE_BASED_NER_F1)


def test_readouts_pick_the_paper_layers():
    layers = {name: readout.resolve_readout(name, 12) for name in readout.readout_names(12)}
    assert layers["embeddings"].layers == (0,)
    assert layers["last"].layers == (12,)
    assert layers["second_to_last"].layers == (11,)
    assert layers["weighted_sum_all"].layers == tuple(range(1, 13)) and layers["weighted_sum_all"].combine == "mix"
    assert layers["weighted_sum_last4"].layers == (9, 10, 11, 12)
    assert layers["concat_last4"].combine == "concat" and layers["concat_last4"].input_size(768) == 4 * 768
    assert layers["layer_5"].layers == (5,)
    assert len(readout.layer_readouts(12)) == 13


def test_layer_out_of_range_is_clear():
    with pytest.raises(readout.LayerOutOfRangeError, match=r"layer 7 is out of range.*layer_0 \.\. layer_6"):
        readout.resolve_readout("layer_7", 6)
    with pytest.raises(readout.LayerOutOfRangeError):
        readout.resolve_readout("layer_-1", 6)
    with pytest.raises(readout.LayerOutOfRangeError, match="needs 4 transformer layers"):
        readout.resolve_readout("concat_last4", 2)


def test_unknown_readout_lists_the_known_ones():
    with pytest.raises(readout.UnknownReadoutError, match=r"Known readouts: embeddings, last.*concat_last4"):
        readout.resolve_readout("third_to_last", 6)


def test_scalar_mix_is_a_softmax_weighted_sum_with_a_scale():
    mix = readout.ScalarMix(3)
    layers = torch.randn(2, 5, 3, 4)
    assert torch.allclose(mix(layers), layers.mean(-2), atol=1e-6)  # zero weights: the plain average
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.0, 100.0, 0.0]))
        mix.gamma.fill_(2.0)
    assert torch.allclose(mix(layers), 2 * layers[..., 1, :], atol=1e-4)
    assert torch.isclose(mix.normalized_weights().sum(), torch.tensor(1.0))


# ----------------------------------------------------------------------------- extraction and cache


def test_first_subtoken_positions():
    assert readout.first_subtoken_positions([None, 0, 0, 1, 2, 2, None]) == [1, 3, 4]


def test_extraction_keeps_every_layer_of_each_first_subtoken(tiny_bert, tokenizer):
    dataset = tiny_conll()
    features = readout.extract_features(tiny_bert, tokenizer, dataset, max_length=64, batch_size=5, progress=False)
    words = sum(len(t) for t in dataset["tokens"])
    assert features.states.shape == (words, 3, 32) and features.states.dtype == torch.float16
    assert features.truncated_words == 0
    # Sentence 0, word 0: the state of its first subtoken (position 1, after [CLS]) at every layer.
    encoded = tokenizer([dataset["tokens"][0]], is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = tiny_bert(**encoded, output_hidden_states=True).hidden_states
    expected = torch.stack([h[0, 1] for h in hidden])
    assert torch.allclose(features.states[0].float(), expected, atol=1e-2)
    assert features.gold_tags() == [[data.CONLL_LABELS[t] for t in s] for s in dataset["ner_tags"]]


def test_truncated_words_are_counted_and_predicted_outside(tiny_bert, tokenizer):
    dataset = tiny_conll()
    features = readout.extract_features(tiny_bert, tokenizer, dataset, max_length=4, batch_size=8, progress=False)
    assert features.truncated_words == sum(len(t) for t in dataset["tokens"]) - len(features.states)
    assert features.truncated_words > 0
    model = readout.FeatureTagger(readout.resolve_readout("last", 2), 32, 9, head="linear")
    predicted = readout.predict_tags(model, features)
    assert [len(p) for p in predicted] == [len(t) for t in dataset["tokens"]]


def test_cache_is_reused_and_keyed_by_model(tiny_bert, tokenizer, cache):
    dataset = tiny_conll()
    first = readout.cached_features(tiny_bert, tokenizer, dataset, "train", PROFILE, progress=False, verbose=False)
    files = list((cache / "features").glob("*.safetensors"))
    assert len(files) == 1
    again = readout.cached_features(tiny_bert, tokenizer, dataset, "train", PROFILE, progress=False, verbose=False)
    assert torch.equal(first.states, again.states) and again.key == first.key
    other = other_bert(1)
    readout.cached_features(other, tokenizer, dataset, "train", PROFILE, progress=False, verbose=False)
    assert len(list((cache / "features").glob("*.safetensors"))) == 2  # another model: another file


def test_cache_built_by_another_model_is_refused(tiny_bert, tokenizer, cache):
    dataset = tiny_conll()
    readout.cached_features(tiny_bert, tokenizer, dataset, "train", PROFILE, progress=False, verbose=False)
    (path,) = (cache / "features").glob("*.safetensors")
    wrong = readout.feature_key(other_bert(1), tokenizer, dataset, "train", PROFILE)
    with pytest.raises(readout.FeatureCacheMismatchError, match=r"model_fingerprint.*rebuild=True"):
        readout.load_features(path, expected_key=wrong)


def test_features_from_different_encoders_do_not_mix(tiny_bert, tokenizer, cache):
    dataset = tiny_conll()
    train = readout.cached_features(tiny_bert, tokenizer, dataset, "train", PROFILE, progress=False, verbose=False)
    other = readout.cached_features(other_bert(1), tokenizer, dataset, "validation", PROFILE, progress=False,
                                    verbose=False)
    with pytest.raises(readout.FeatureCacheMismatchError, match="different encoders"):
        readout.check_compatible(train, other)


def test_label_sets_that_do_not_match_are_refused(tiny_bert, tokenizer):
    dataset = tiny_conll()
    train = readout.extract_features(tiny_bert, tokenizer, dataset, max_length=64, progress=False)
    validation = readout.extract_features(tiny_bert, tokenizer, dataset, max_length=64, progress=False)
    validation.label_names = ["O", "B-PER", "I-PER"]
    with pytest.raises(readout.LabelMismatchError, match="label sets differ"):
        readout.check_compatible(train, validation)
    with pytest.raises(readout.LabelMismatchError, match="label sets differ"):
        readout.evaluate_readout(train, validation, "last", PROFILE, head="linear", epochs=1)


# ----------------------------------------------------------------------------- heads and scoring


def test_entity_f1_is_seqeval_times_100():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    assert readout.entity_f1_x100(gold, gold) == 100.0
    assert readout.entity_f1_x100(gold, [["B-PER", "O", "O", "B-LOC"]]) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="4 gold tags but 3"):
        readout.entity_f1_x100(gold, [["O", "O", "O"]])


@pytest.mark.parametrize("head", readout.HEAD_KINDS)
@pytest.mark.parametrize("name", ["last", "weighted_sum_all", "concat_last4"])
def test_heads_shape_and_padding(head, name):
    torch.manual_seed(0)
    model = readout.FeatureTagger(readout.resolve_readout(name, 4), 8, 9, head=head, lstm_hidden=6).eval()
    x = torch.randn(2, 5, len(model.readout.layers), 8)
    logits = model(x, torch.tensor([5, 3]))
    assert logits.shape == (2, 5, 9)
    # The second sentence's words must not depend on its padding (packed BiLSTM).
    x2 = x.clone()
    x2[1, 3:] = 100.0
    assert torch.allclose(model(x2, torch.tensor([5, 3]))[1, :3], logits[1, :3], atol=1e-5)


def test_a_readout_learns_a_learnable_rule(tokenizer, cache):
    """The tiny BERT is random, but its embeddings separate the capitalised names: the
    BiLSTM readout must beat chance by far on them."""
    torch.manual_seed(0)
    bert = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                max_position_embeddings=128), add_pooling_layer=False)
    train = readout.extract_features(bert, tokenizer, tiny_conll(48, seed=0), max_length=32, progress=False)
    valid = readout.extract_features(bert, tokenizer, tiny_conll(32, seed=1), max_length=32, progress=False)
    profile = PROFILE.with_(lstm_hidden=16, batch_size=8)
    result = readout.evaluate_readout(train, valid, "weighted_sum_all", profile, head="bilstm", epochs=10, lr=1e-2,
                                      device="cpu")
    assert result.f1 > 90
    assert result.mix_weights is not None and sum(result.mix_weights) == pytest.approx(1.0)
    assert len(result.epoch_seconds) == 10


def test_encoder_flops_counts_dense_layers():
    cfg = BertConfig()  # bert-base: 85M parameters in the 12 transformer layers' matrices
    flops = speed.encoder_flops(cfg, tokens=1, mean_length=0)
    assert flops == pytest.approx(2 * 12 * (4 * 768**2 + 2 * 768 * 3072))


def test_readouts_for_the_same_layers_train_once(tiny_bert, tokenizer):
    features = readout.extract_features(tiny_bert, tokenizer, tiny_conll(), max_length=64, progress=False)
    profile = PROFILE.with_(readout_epochs=1)
    results = readout.evaluate_readouts(features, features, ["last", "layer_2", "embeddings"], profile,
                                        head="linear", progress=False)
    assert results["layer_2"].readout == "layer_2" and results["last"].readout == "last"
    assert results["layer_2"].model is results["last"].model  # one training, two names
    assert results["embeddings"].model is not results["last"].model
    with pytest.raises(readout.UnknownReadoutError):
        readout.evaluate_readouts(features, features, ["last", "lastt"], profile, head="linear", progress=False)


def test_finetune_row_scores_every_validation_word(tiny_bert, tokenizer):
    conll = datasets.DatasetDict({"train": tiny_conll(16, seed=0), "validation": tiny_conll(8, seed=1)})
    profile = PROFILE.with_(max_length=6, batch_size=8, finetune_epochs=1)  # max_length 6 truncates some words
    result = readout.finetune_tagger(tiny_bert, tokenizer, conll, profile, progress=False)
    assert 0 <= result.f1 <= 100
    assert len(result.history.epoch_seconds) == 1 and result.seconds_per_epoch > 0


def test_depth_curves_share_a_relative_axis_and_check_lengths():
    import matplotlib

    matplotlib.use("Agg")
    ax = readout.plot_depth_curves({"six": (6, [1, 2, 3, 4, 5, 4, 3]), "four": (4, [1, 3, 2, 2, 1])})
    xs = [list(line.get_xdata()) for line in ax.get_lines() if len(line.get_xdata()) > 1]
    assert xs[0][-1] == xs[1][-1] == 1.0 and len(xs[0]) == 7 and len(xs[1]) == 5
    with pytest.raises(readout.LayerOutOfRangeError, match="expected 5"):
        readout.plot_depth_curves({"four": (4, [1, 2, 3])})


def test_layer_and_mix_plots_and_the_heaviest_layer():
    import matplotlib

    matplotlib.use("Agg")
    fig = readout.plot_layer_curves({"BiLSTM": [1.0, 3.0, 2.0], "linear probe": [1.0, 1.5, 2.5]}, peak=1)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["emb", "1", "2"]
    mix = readout.ReadoutResult("weighted_sum_all", "bilstm", 50.0, 1.0, [0.2, 0.5, 0.3], (0, 1, 2), 1.5)
    fig = readout.plot_mix_weights({"weighted_sum_all": mix, "again": mix}, num_layers=2)
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "weighted_sum_all (gamma 1.50)"
    assert readout.heaviest_layer(mix) == 1


def test_orderings_that_differ_from_the_paper_are_each_named():
    paper = {"embeddings": 91.0, "last": 94.9, "second_to_last": 95.6, "finetune": 96.4}
    run = {"embeddings": 72.7, "last": 75.0, "second_to_last": 74.9, "finetune": 79.5}
    assert readout.differing_orderings(paper, run) == [
        "second_to_last > last in the paper (95.6 vs 94.9), last > second_to_last here (75.0 vs 74.9)"]
    assert readout.differing_orderings(paper, paper) == []
    assert readout.gaps_to_finetuning(run, ("embeddings", "last")) == pytest.approx({"embeddings": 6.8, "last": 4.5})


def test_the_layer_worth_reading_is_what_both_heads_read_near_their_best():
    curves = {"BiLSTM": [70.0, 74.0, 77.5, 77.0, 73.0], "linear probe": [40.0, 55.0, 60.0, 66.7, 52.8]}
    assert readout.layer_worth_reading(curves) == ([3], {"BiLSTM": 2, "linear probe": 3})
    assert readout.layer_worth_reading(curves, within=0.1) == ([], {"BiLSTM": 2, "linear probe": 3})


def _runs(**f1s):
    from ftcourse.readout import ReadoutResult

    return {name: {seed: ReadoutResult(name, "bilstm", f1, [1.0]) for seed, f1 in enumerate(values)}
            for name, values in f1s.items()}


def test_the_paper_claims_read_paired_differences_over_seeds_and_can_fail_or_tie():
    from ftcourse import published

    paper = published.BERT_FEATURE_BASED_NER_F1
    clear = _runs(embeddings=(80, 81, 79), last=(88, 89, 88), second_to_last=(90, 91, 90),
                  weighted_sum_all=(89, 90, 89), weighted_sum_last4=(89.5, 90.5, 89.5), concat_last4=(92, 93, 92))
    table = readout.paper_claims_table(paper, clear, finetuned_f1=95.0)
    assert [row[3] for row in table.rows] == ["agrees"] * 4
    assert readout.best_readout(clear, readout.PAPER_READOUTS) == ("concat_last4", [])
    # second-to-last and last swap on seed 1: the interval holds zero, a tie (not a disagreement)
    noisy = {**clear, "second_to_last": _runs(x=(90, 85, 90))["x"]}
    row = readout.paper_claims_table(paper, noisy, 95.0).rows[0]
    assert row[2] == "tie" and row[3] == "not resolved (a tie)"
    # a planted run where last clearly beats second-to-last and the embeddings win: it disagrees
    wrong = {**clear, "second_to_last": _runs(x=(85, 86, 85))["x"], "embeddings": _runs(x=(99, 99.5, 99))["x"]}
    rows = readout.paper_claims_table(paper, wrong, 95.0).rows
    assert rows[0][3] == "DISAGREES" and rows[1][3] == "DISAGREES" and rows[2][3] == "DISAGREES"
    assert rows[3][2] == "no"  # fine-tuning's one run under the best readout's interval
    assert readout.seed_means(clear)["concat_last4"].f1 == pytest.approx(92 + 1 / 3)


def test_each_readout_gets_its_own_rate_chosen_on_a_carved_part_only(tiny_bert, tokenizer):
    from ftcourse import data

    features = readout.extract_features(tiny_bert, tokenizer, tiny_conll(20), max_length=64, progress=False)
    rest, held = readout.carve(features, 6)
    assert (rest.num_sentences, held.num_sentences) == (14, 6) and held.carved and not rest.carved
    assert int(rest.words.sum() + held.words.sum()) == int(features.words.sum())  # every word, in one part
    assert held.gold_tags() == [features.gold_tags()[i] for i in sorted(
        set(range(20)) - set(data.carve_validation(datasets.Dataset.from_dict({"i": list(range(20))}), 6)[0]["i"]))]
    profile = PROFILE.with_(readout_epochs=1)
    rates = readout.choose_readout_lrs(rest, held, ["last", "layer_2", "embeddings"], profile, head="linear",
                                       grid=(1e-3, 1e-2), progress=False)
    assert rates.by_name["last"] is rates.by_name["layer_2"]  # the same layers: one search
    for found in rates.by_name.values():
        assert found.best == max(found.scores, key=found.scores.get) and len(found.scores) >= 2
    assert rates.line().startswith("lr chosen per readout on validation (F1 x100): last = layer_2 0.000333333 ")
    assert set(rates.lrs) == {"last", "layer_2", "embeddings"}
    for part in (features, rest):  # the whole split, or the part the head trains on, never chooses
        with pytest.raises(data.ReportedSplitError, match="choose_readout_lrs"):
            readout.choose_readout_lrs(rest, part, ["last"], profile, head="linear", progress=False)
