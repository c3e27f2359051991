"""The span and pair heads, trained (lesson 4b): examples built right, answers decoded within the
passage, SQuAD's scores, a cross-encoder that learns scores, and the cost of comparing n sentences."""

import datasets
import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import config, data, heads, pairs, spans


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    return BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                max_position_embeddings=128), add_pooling_layer=False)


@pytest.fixture
def profile():
    return config.get_profile("smoke").with_(regime_batch_size=8, siamese_batch_size=8, siamese_epochs=1)


def conll_rows():
    tag = data.CONLL_LABELS.index
    return datasets.Dataset.from_dict({
        "tokens": [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["no", "entity", "here"],
                   ["BRUSSELS", "1996-08-22"]],
        "ner_tags": [[tag("B-ORG"), 0, tag("B-MISC"), 0], [tag("B-PER"), tag("I-PER")], [0, 0, 0], [tag("B-LOC"), 0]],
    })


def test_entity_questions_ask_about_every_kind_in_turn_and_skip_sentences_without_one():
    questions = spans.entity_questions(conll_rows())
    # sentence 0 asks from PER on: it has no PER, so ORG; sentence 1 from ORG on: it has PER only;
    # sentence 2 has no entity; sentence 3 from MISC on: LOC.
    assert questions["answer"] == ["EU", "Peter Blackburn", "BRUSSELS"]
    assert questions["question"] == ["Which organisation is mentioned?", "Which person is mentioned?",
                                     "Which place is mentioned?"]
    assert spans.entity_questions(conll_rows(), limit=2).num_rows == 2
    with pytest.raises(data.EmptySplitError, match="names an entity"):
        spans.entity_questions(conll_rows().select([2]))


def test_tokenized_spans_point_at_the_answer(tokenizer):
    examples = spans.tokenize_spans(spans.entity_questions(conll_rows()), tokenizer, 32)
    for example in examples:
        start, end = example["labels"]
        assert tokenizer.decode(example["input_ids"][start:end + 1]) == example["answer"].lower()
        assert all(example["token_type_ids"][i] == 1 for i in range(start, end + 1))
        # the offsets read the answer back as the passage's own text, case and punctuation kept
        assert example["context"][example["offsets"][start][0]:example["offsets"][end][1]] == example["answer"]


def test_an_answer_with_punctuation_is_read_back_exactly(tokenizer):
    tag = data.CONLL_LABELS.index
    rows = datasets.Dataset.from_dict({"tokens": [["The", "U.S.", "said"]], "ner_tags": [[0, tag("B-LOC"), 0]]})
    examples = spans.tokenize_spans(spans.entity_questions(rows), tokenizer, 32)
    start, end = examples[0]["labels"]
    assert tokenizer.decode(examples[0]["input_ids"][start:end + 1]) == "u. s."  # what decoding ids would give
    assert examples[0]["context"][examples[0]["offsets"][start][0]:examples[0]["offsets"][end][1]] == "U.S."


def test_a_truncated_answer_is_dropped(tokenizer):
    long = datasets.Dataset.from_dict({"question": ["Which place is mentioned?"],
                                       "context": [" ".join(["word"] * 40) + " Paris"],
                                       "answer_start": [len(" ".join(["word"] * 40)) + 1], "answer": ["Paris"]})
    assert spans.tokenize_spans(long, tokenizer, 16).num_rows == 0


def test_best_span_stays_in_the_passage_in_order_and_short():
    context = torch.tensor([False, False, True, True, True, False])
    start = torch.tensor([9.0, 0, 1, 6, 0, 9])  # the best start logits sit outside the passage
    end = torch.tensor([9.0, 0, 4, 0, 2, 9])
    assert spans.best_span(start, end, context) == (3, 4)  # start 3 then end 4 (end 2 would precede it)
    assert spans.best_span(start, end, context, max_answer_tokens=1) == (3, 3)
    with pytest.raises(ValueError, match="context"):
        spans.best_span(start, end, torch.zeros(6, dtype=torch.bool))


@pytest.mark.parametrize("predicted, gold, em, f1", [
    ("The European Union", "european union", 1.0, 1.0),
    ("European", "European Union", 0.0, 2 / 3),
    ("Paris", "London", 0.0, 0.0),
])
def test_squad_scores(predicted, gold, em, f1):
    assert spans.exact_match(predicted, gold) == em
    assert spans.token_f1(predicted, gold) == pytest.approx(f1)


def test_span_regimes_train_what_they_say(encoder, tokenizer, profile):
    examples = spans.tokenize_spans(spans.entity_questions(conll_rows()), tokenizer, 32)
    frozen = spans.span_model("frozen", encoder, profile)
    assert heads.count_parameters(frozen)["trainable"] == 32 * 2 + 2
    lora = spans.span_model("lora", encoder, profile)
    assert 32 * 2 + 2 < heads.count_parameters(lora)["trainable"] < heads.count_parameters(encoder)["total"]
    scores, models = spans.train_span_regimes(encoder, examples, examples, tokenizer, profile)
    assert list(scores) == list(spans.SPAN_REGIMES)
    assert all(0 <= s["exact_match"] <= s["f1"] + 1e-9 <= 1 + 1e-9 and s["steps"] == 1 for s in scores.values())
    assert not all(torch.equal(a, b) for a, b in zip(encoder.parameters(), models["finetune"].encoder.parameters()))
    with pytest.raises(ValueError, match="Known regimes: frozen, lora, finetune"):
        spans.span_model("prompt", encoder, profile)
    assert "exact match" in spans.span_table(scores, examples.num_rows).columns


def test_each_span_regime_gets_its_own_rate_chosen_on_carved_questions(encoder, tokenizer, profile):
    from ftcourse import data

    examples = spans.tokenize_spans(spans.entity_questions(conll_rows()), tokenizer, 32)
    rest, validation = data.carve_validation(examples, 2)
    found = spans.choose_span_lrs(encoder, rest, validation, tokenizer, profile, progress=False)
    defaults = spans.default_span_lrs(profile)
    for regime, result in found.items():  # the default / 4, x1, x4, and an extension when the best is at an end
        assert {defaults[regime] / 4, defaults[regime], defaults[regime] * 4} <= set(result.scores)
        assert result.best == max(result.scores, key=result.scores.get)
    assert list(found) == list(spans.SPAN_REGIMES) and "frozen " in spans.span_lrs_line(found)
    scores, _ = spans.train_span_regimes(encoder, examples, examples, tokenizer, profile, lrs={"lora": 1e-3})
    assert scores["lora"]["lr"] == 1e-3 and scores["finetune"]["lr"] == defaults["finetune"]
    with pytest.raises(data.ReportedSplitError, match="choose_span_lrs"):
        spans.choose_span_lrs(encoder, rest, examples, tokenizer, profile, progress=False)


def stsb_rows(n=24):
    g = torch.Generator().manual_seed(0)
    words = ["a dog runs", "a cat sleeps", "the man sings", "two kids play", "rain falls", "a car stops"]
    first = [words[int(torch.randint(0, 6, (1,), generator=g))] for _ in range(n)]
    second = [w if i % 2 else words[(words.index(w) + 1) % 6] for i, w in enumerate(first)]
    return datasets.Dataset.from_dict({"sentence1": first, "sentence2": second,
                                       "score": [5.0 if i % 2 else 0.5 for i in range(n)]})


def test_a_cross_encoder_reads_both_sentences_and_learns_the_scores(encoder, tokenizer, profile):
    train = pairs.tokenize_pairs(stsb_rows(), tokenizer, 32)
    assert set(train[0]["token_type_ids"]) == {0, 1}
    assert sorted(set(train["labels"])) == pytest.approx([0.1, 1.0])  # STS-B's 0.5 and 5.0, rescaled to 0..1
    model, history = pairs.train_cross_encoder(encoder, train, profile, epochs=30, lr=3e-3)
    assert len(history.losses) == 30 * 3
    assert pairs.spearman_x100(model, train) > 50  # same-sentence pairs score high, others low


def test_pairwise_cost_counts_the_passes_and_extrapolates(encoder, tokenizer):
    class Bi:  # a bi-encoder stand-in: one vector per sentence
        def encode(self, sentences):
            return torch.randn(len(sentences), 8).numpy()

    cost = pairs.pairwise_cost(pairs.cross_encoder(encoder), Bi(), tokenizer, ["a b", "c d", "e f", "g h"], 16)
    assert (cost["cross_passes"], cost["bi_passes"]) == (6, 4)
    far = pairs.extrapolate(cost, 10_000)
    assert far["cross_passes"] == 49_995_000 and far["bi_passes"] == 10_000
    assert far["cross_seconds"] == pytest.approx(cost["cross_seconds"] / 6 * 49_995_000)
    assert len(pairs.cost_table(cost, far).rows) == 2
    with pytest.raises(ValueError, match="at least 2"):
        pairs.pairwise_cost(None, Bi(), tokenizer, ["alone"], 16)


def test_the_encoder_verdict_asks_whether_a_better_start_closes_most_of_the_gap():
    assert pairs.encoder_verdict((25.0, 57.0), (76.6, 86.0)).endswith("closes most of the gap: yes")
    assert pairs.encoder_verdict((25.0, 57.0), (60.0, 80.0)).endswith("closes most of the gap: no")  # 20 of 32
    assert pairs.encoder_verdict((60.0, 50.0), (70.0, 69.0)).endswith(": no")  # no lead to explain
    # a gap measured from a cross-encoder below its own encoder's floor is a failed run's: not tested
    assert pairs.encoder_verdict((25.0, 57.0), (76.6, 86.0), floors=(20.0, 70.0)).endswith("closes most of the gap: yes")
    failed = pairs.encoder_verdict((25.0, 57.0), (76.6, 86.0), floors=(35.9, 70.0))
    assert "NOT TESTED (the raw encoder's cross-encoder sits below that encoder's" in failed and not failed.endswith("yes")
    both = pairs.encoder_verdict((25.0, 57.0), (76.6, 86.0), floors=(35.9, 80.0))
    assert "NOT TESTED (both cross-encoders sit below their encoders'" in both and not both.endswith("yes")
    by_encoder = {"raw_encoder": {"cross": {"test": 25.0}, "bi": {"test": 57.0}, "zero_shot": {"test": 35.9}},
                  "encoder": {"cross": {"test": 76.6}, "bi": {"test": 86.0}, "zero_shot": {"test": 82.0}}}
    table = pairs.comparison_table(by_encoder, 2000, 2, {"cross_encoder": 84.30, "bi_encoder": 84.67})
    assert [row[5] for row in table.rows] == pytest.approx([32.0, 9.4, 0.37])  # bi - cross, the paper's last
    assert [row[6] for row in table.rows] == [35.9, 82.0, None]  # each encoder's floor; the paper prints none


def test_the_cross_encoder_chooser_extends_its_grid_and_chooses_its_epochs(encoder, tokenizer, profile):
    from ftcourse import data

    rows = stsb_rows(30)
    rest, held = data.carve_validation(rows, 8)
    train, validation = (pairs.tokenize_pairs(part, tokenizer, 32) for part in (rest, held))
    lr, scores = pairs.choose_lr(encoder, train, validation, [1e-4, 1e-3], profile, extensions=1)
    first_best = max([1e-4, 1e-3], key=scores.get)  # a 2-point grid's best is at an end: it grows that way, once
    assert len(scores) == 3 and (4e-3 in scores) == (first_best == 1e-3) and (2.5e-5 in scores) == (first_best == 1e-4)
    assert lr == max(scores, key=scores.get)
    epochs, by_epochs = pairs.choose_epochs(encoder, train, validation, lr, (1, 2), profile, known={1: scores[lr]})
    assert set(by_epochs) == {1, 2} and by_epochs[1] == scores[lr] and epochs == max(by_epochs, key=by_epochs.get)
    choice = pairs.choose_cross_encoder(encoder, train, validation, [1e-4, 1e-3], profile, epochs=(1, 2))
    fresh, _ = pairs.train_cross_encoder(encoder, train, profile, lr=choice.lr, epochs=choice.epochs, progress=False)
    # the chosen model is the run at the choice (kept, not trained again): the same scores as a fresh run
    assert torch.equal(pairs.predicted_scores(choice.model, validation), pairs.predicted_scores(fresh, validation))


def test_a_cross_encoder_below_its_own_zero_shot_score_is_named():
    assert pairs.zero_shot_verdict(40.0, 35.9).endswith("above it")
    assert "BELOW IT" in pairs.zero_shot_verdict(22.7, 35.9)
    assert "BELOW IT" in pairs.zero_shot_verdict(float("nan"), 35.9)  # a constant prediction's Spearman
    assert pairs.zero_shot_verdict(22.7, 35.9, encoder="the raw encoder").startswith("the cross-encoder from the raw encoder (22.70")


def test_the_cost_verdict_reads_how_the_time_grew_and_can_fail():
    published = {"cross_encoder": 84.3, "bi_encoder": 84.67}
    paper_cost = {"cross_encoder_hours": 65, "bi_encoder_seconds": 5}
    half = {"sentences": 50, "cross_passes": 1225, "bi_passes": 50, "cross_seconds": 0.7, "bi_seconds": 0.05}
    cost = {"sentences": 100, "cross_passes": 4950, "bi_passes": 100, "cross_seconds": 2.9, "bi_seconds": 0.1}
    far = pairs.extrapolate(cost, 10_000)
    lines = pairs.verdicts(80.0, 80.2, cost, far, published, paper_cost, half=half)
    assert lines[0].endswith("agrees") and "agrees" not in lines[1] and lines[2].endswith("agrees")
    assert "grew 4.1x" in lines[2]
    flat = {**cost, "cross_seconds": 1.4}  # a cross-encoder whose time only doubled: not the pairs' growth
    assert pairs.verdicts(80.0, 80.2, flat, far, published, paper_cost, half=half)[2].endswith("DISAGREES")
    assert len(pairs.verdicts(80.0, 80.2, cost, far, published, paper_cost)) == 2  # no half: no growth line


def test_the_closeness_verdict_is_not_decided_by_a_failed_cross_encoder():
    published = {"cross_encoder": 84.3, "bi_encoder": 84.67}
    paper_cost = {"cross_encoder_hours": 65, "bi_encoder_seconds": 5}
    cost = {"sentences": 100, "cross_passes": 4950, "bi_passes": 100, "cross_seconds": 2.9, "bi_seconds": 0.1}
    far = pairs.extrapolate(cost, 10_000)

    def closeness(cross, bi, floor=None):
        return pairs.verdicts(cross, bi, cost, far, published, paper_cost, floor=floor)[0]

    assert closeness(80.0, 80.2, floor=35.9).endswith("the two are close: agrees")
    assert "close: DISAGREES (the bi-encoder leads by 29.0 points)" in closeness(20.0, 49.0)  # no floor given
    assert "close: DISAGREES" in closeness(50.0, 79.0, floor=35.9)  # a sound run can fail the claim
    failed = closeness(20.2, 49.1, floor=35.9)  # below its own untrained cosine: tests nothing
    assert "close: NOT TESTED" in failed and "DISAGREES" not in failed and "agrees" not in failed


def test_the_budget_verdict_says_whether_more_pairs_and_epochs_clear_the_floor():
    assert pairs.budget_verdict({2: 30.6, 4: 23.9}, 29.7, 36.8, 2000, 5449, 2).endswith(
        "no: the budget is not what holds it back")
    assert pairs.budget_verdict({2: 40.0, 4: 38.0}, 29.7, 36.8, 2000, 5449, 2).endswith("yes: the budget held it back")
    assert pairs.budget_verdict({2: 40.0}, 38.0, 36.8, 2000, 5449, 2).endswith("already clears it")
    nan = float("nan")  # a cross-encoder that predicts one constant: never above the floor
    assert pairs.budget_verdict({2: nan, 4: nan}, nan, 36.8, 2000, 5449, 2).endswith("not what holds it back")
    assert pairs.budget_verdict({2: nan, 4: 40.0}, 29.7, 36.8, 2000, 5449, 2).endswith("yes: the budget held it back")
    assert "NOT TESTED (the raw encoder's" in pairs.encoder_verdict((nan, 57.0), (76.6, 86.0), floors=(35.9, 70.0))


def test_more_budget_trains_on_every_pair_and_reads_a_carved_part_only(encoder, tokenizer, profile):
    from ftcourse import data

    rows = stsb_rows(24)
    rest, held = data.carve_validation(rows, 8)
    scores = pairs.more_budget(encoder, tokenizer, rest, held, 1e-3, profile, epochs=(1, 2))
    assert set(scores) == {1, 2} and all(-100 <= s <= 100 for s in scores.values())
    with pytest.raises(data.ReportedSplitError):
        pairs.more_budget(encoder, tokenizer, rest, rows, 1e-3, profile, epochs=(1,))
