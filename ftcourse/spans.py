"""The span head, trained: a question and a passage in, the answer's first and last token out.

Extractive question answering (SQuAD's shape) packs ``[CLS] question [SEP] passage [SEP]`` and
predicts, for every passage token, how likely it is to start the answer and to end it
(``heads.SpanExtractor``). The course makes such examples from CoNLL-2003 itself
(``data.entity_question``): "Which organisation is mentioned?" over a sentence, with the
organisation as the answer span. Scored as SQuAD is: exact match and token F1 of the decoded
answer against the gold one, after lower-casing and dropping punctuation and articles.
"""

from __future__ import annotations

import collections
import copy
import re
import string

import datasets
import torch
from torch import nn
from tqdm.auto import tqdm

from . import config, data, heads, lora, training
from .report import Table

#: The entity kinds asked about, in turn: sentence i is asked about the first kind, from
#: KINDS[i % 4] on, that it contains, so every kind of question appears.
KINDS = ("PER", "ORG", "LOC", "MISC")
MAX_ANSWER_TOKENS = 16  # CoNLL entities are a few words long


def entity_questions(split: datasets.Dataset, limit: int | None = None) -> datasets.Dataset:
    """``question``, ``context``, ``answer_start`` (a character offset) and ``answer`` for
    each CoNLL-2003 sentence that names an entity (up to ``limit`` of them, in order)."""
    rows = collections.defaultdict(list)
    for index, (tokens, tags) in enumerate(zip(split["tokens"], split["ner_tags"])):
        names = {data.CONLL_LABELS[t] for t in tags}
        kinds = [KINDS[(index + j) % len(KINDS)] for j in range(len(KINDS))]
        kind = next((k for k in kinds if f"B-{k}" in names), None)
        if kind is None:
            continue
        question, context, start, answer = data.entity_question(tokens, tags, kind)
        for key, value in zip(("question", "context", "answer_start", "answer"), (question, context, start, answer)):
            rows[key].append(value)
        if limit is not None and len(rows["answer"]) == limit:
            break
    if not rows:
        raise data.EmptySplitError("No sentence of this split names an entity: there is nothing to ask about.")
    return datasets.Dataset.from_dict(dict(rows))


def tokenize_spans(questions: datasets.Dataset, tokenizer, max_length: int) -> datasets.Dataset:
    """``[CLS] question [SEP] context [SEP]`` token ids, with ``labels`` = the answer's (start,
    end) token positions. Kept for scoring: the gold ``answer``, the ``context`` and each
    token's character ``offsets`` in it, so an answer is read back as the passage's own text.
    Examples whose answer was truncated away are dropped."""
    encoded = tokenizer(list(questions["question"]), list(questions["context"]), truncation="only_second",
                        max_length=max_length, return_offsets_mapping=True)
    rows = collections.defaultdict(list)
    for i, (start, answer, context) in enumerate(zip(questions["answer_start"], questions["answer"],
                                                     questions["context"])):
        try:
            positions = heads.char_span_to_tokens(encoded, i, start, start + len(answer))
        except ValueError:
            continue
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            rows[key].append(encoded[key][i])
        rows["labels"].append(list(positions))
        rows["answer"].append(answer)
        rows["context"].append(context)
        rows["offsets"].append([list(pair) for pair in encoded["offset_mapping"][i]])
    return datasets.Dataset.from_dict(dict(rows))


#: What ``tokenize_spans`` keeps for scoring, beside the model's inputs.
SCORING_COLUMNS = ("answer", "context", "offsets")


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, context: torch.Tensor,
              max_answer_tokens: int = MAX_ANSWER_TOKENS) -> tuple[int, int]:
    """The (start, end) with the highest start + end logit such that both lie in the context
    (``context``: a bool mask over positions), start <= end, and the span is at most
    ``max_answer_tokens`` long."""
    scores = start_logits[:, None] + end_logits[None, :]  # (start, end)
    n = scores.shape[0]
    positions = torch.arange(n)
    allowed = (positions[None, :] >= positions[:, None]) & (positions[None, :] - positions[:, None] < max_answer_tokens)
    allowed &= context[:, None] & context[None, :]
    if not allowed.any():
        raise ValueError("No position of this example is context: check the token type ids.")
    flat = scores.masked_fill(~allowed, float("-inf")).argmax().item()
    return divmod(flat, n)


def context_mask(example: dict, sep_token_id: int) -> torch.Tensor:
    """The passage's positions: token type 1, without the closing [SEP]."""
    ids = torch.as_tensor(example["input_ids"])
    return (torch.as_tensor(example["token_type_ids"]) == 1) & (ids != sep_token_id)


def decode(model, examples: datasets.Dataset, tokenizer) -> list[str]:
    """The model's answer to each example: the passage's own text from its start token's first
    character to its end token's last (as SQuAD's evaluation reads answers)."""
    logits, _ = training.predict(model, examples.remove_columns(list(SCORING_COLUMNS)),
                                 pad_token_id=tokenizer.pad_token_id)
    answers = []
    for example, example_logits in zip(examples, logits):
        n = len(example["input_ids"])
        start, end = best_span(example_logits[0, :n], example_logits[1, :n], context_mask(example, tokenizer.sep_token_id))
        answers.append(example["context"][example["offsets"][start][0]:example["offsets"][end][1]])
    return answers


def normalize(text: str) -> list[str]:
    """SQuAD's normalisation: lower case, no punctuation, no articles, words split on space."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def exact_match(predicted: str, gold: str) -> float:
    return float(normalize(predicted) == normalize(gold))


def token_f1(predicted: str, gold: str) -> float:
    """The harmonic mean of word precision and recall between the two answers (SQuAD's F1)."""
    predicted, gold = normalize(predicted), normalize(gold)
    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if not predicted or not gold:
        return float(predicted == gold)
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def score(model, examples: datasets.Dataset, tokenizer) -> dict:
    """Exact match and token F1 (fractions) of the model's answers, averaged over the examples."""
    answers = decode(model, examples, tokenizer)
    gold = examples["answer"]
    return {"exact_match": sum(map(exact_match, answers, gold)) / len(gold),
            "f1": sum(map(token_f1, answers, gold)) / len(gold)}


SPAN_REGIMES = ("frozen", "lora", "finetune")


def span_model(regime: str, encoder: nn.Module, profile=None, seed: int = 0) -> heads.TaskModel:
    """``SpanExtractor(encoder)`` in ``regime`` (a copy of ``encoder`` is used): ``frozen``
    trains the head alone, ``lora`` LoRA at the profile's rank and the head, ``finetune``
    everything."""
    if regime not in SPAN_REGIMES:
        raise ValueError(f"Unknown regime {regime!r}. Known regimes: {', '.join(SPAN_REGIMES)}.")
    profile = config.get_profile(profile)
    torch.manual_seed(seed)
    head = heads.SpanExtractor(encoder.config.hidden_size)
    if regime == "lora":
        return lora.lora_task_model(copy.deepcopy(encoder), head, rank=profile.lora_rank)
    return heads.set_regime(heads.TaskModel(copy.deepcopy(encoder), head), regime)


def _span_run(regime: str, encoder: nn.Module, train: datasets.Dataset, lr: float, tokenizer, profile, seed: int,
              epochs: int):
    """One regime's span model trained at ``lr``: the encoder's rate (LoRA, fine-tuning; the new
    head at the profile's linear-probe rate), or the head's own when the encoder is frozen."""
    model = span_model(regime, encoder, profile, seed)
    settings = training.TrainConfig(lr=lr, head_lr=lr if regime == "frozen" else profile.probe_lr, epochs=epochs,
                                    batch_size=profile.regime_batch_size, seed=seed, progress=False)
    return model, training.train(model, train.remove_columns(list(SCORING_COLUMNS)), settings,
                                 pad_token_id=tokenizer.pad_token_id)


def default_span_lrs(profile=None) -> dict:
    """What each regime's rate defaults to: the head's linear-probe rate when the encoder is
    frozen, the profile's LoRA and fine-tuning rates otherwise."""
    profile = config.get_profile(profile)
    return {"frozen": profile.probe_lr, "lora": profile.lora_lr, "finetune": profile.finetune_lr}


def choose_span_lrs(encoder: nn.Module, train: datasets.Dataset, validation: datasets.Dataset, tokenizer,
                    profile=None, epochs: int = 1, seed: int = 0, progress: bool = True) -> dict:
    """Each regime's own rate for the span head: trained on ``train`` for ``epochs`` at the
    regime's default rate / 4, x1 and x4 (``default_span_lrs``), scored by token F1 on
    ``validation`` (questions carved from the training ones, never the held-out dev questions),
    the grid extended past an edge its best sits on (``experiments.grid.search``). Returns
    ``{regime: GridResult}`` (F1 x100)."""
    from .experiments import grid

    data.require_validation(validation, "spans.choose_span_lrs")
    profile = config.get_profile(profile)
    found = {}
    for regime, base in tqdm(default_span_lrs(profile).items(), desc="span lr sweep", disable=not progress):
        def f1_at(lr, regime=regime):
            model, _ = _span_run(regime, encoder, train, lr, tokenizer, profile, seed, epochs)
            return 100 * score(model, validation, tokenizer)["f1"]

        found[regime] = grid.search(f1_at, (base / 4, base, base * 4))
    return found


def span_lrs_line(found: dict, epochs: int = 1) -> str:
    return (f"span lr by regime on validation (token F1 x100, {epochs} epoch{'s' if epochs > 1 else ''}): " + "; ".join(
        f"{regime} " + g.line("{:.1f}") for regime, g in found.items()))


def train_span_regimes(encoder: nn.Module, train: datasets.Dataset, held_out: datasets.Dataset, tokenizer,
                       profile=None, seed: int = 0, epochs: int = 1, lrs: dict | None = None) -> tuple[dict, dict]:
    """Each of ``SPAN_REGIMES`` trained on ``train`` for ``epochs`` (the same steps for all) at its
    rate in ``lrs`` (``choose_span_lrs``; default ``default_span_lrs``), then scored on
    ``held_out``. Returns ``(scores by regime, models by regime)``; each score carries the run's
    trainable parameters, steps, lr and seconds per epoch."""
    profile = config.get_profile(profile)
    lrs = {**default_span_lrs(profile), **(lrs or {})}
    scores, models = {}, {}
    for regime in SPAN_REGIMES:
        model, history = _span_run(regime, encoder, train, lrs[regime], tokenizer, profile, seed, epochs)
        scores[regime] = {**score(model, held_out, tokenizer), "trainable": heads.count_parameters(model)["trainable"],
                          "steps": len(history.losses), "lr": lrs[regime],
                          "seconds_per_epoch": history.seconds_per_epoch}
        models[regime] = model
    return scores, models


def span_table(scores: dict, n_held_out: int) -> Table:
    rows = [[regime, s["trainable"], s["lr"], s["steps"], s["seconds_per_epoch"], 100 * s["exact_match"], 100 * s["f1"]]
            for regime, s in scores.items()]
    return Table(["regime", "trainable", "lr", "steps", "s/epoch", "exact match", "token F1"], rows,
                 formats={"lr": "{:g}", "s/epoch": "{:.1f}", "exact match": "{:.1f}", "token F1": "{:.1f}"},
                 notes=[f"held out: {n_held_out:,} questions over CoNLL-2003 dev sentences; x100, as SQuAD reports"])


def verdicts(scores: dict) -> list[str]:
    """What the runs say about the text's ordering: the more of the encoder moves, the better
    the spans (fine-tuning >= LoRA >= frozen on token F1)."""
    f1 = {regime: 100 * s["f1"] for regime, s in scores.items()}
    ordered = f1["finetune"] >= f1["lora"] >= f1["frozen"]
    return [f"span F1: frozen {f1['frozen']:.1f}, LoRA {f1['lora']:.1f}, fine-tuning {f1['finetune']:.1f}; "
            f"the more of the encoder moves, the better the spans: {'agrees' if ordered else 'DISAGREES'}"]
