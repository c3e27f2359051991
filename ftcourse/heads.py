"""The composition ``y = Predict_ω(Encoder_θ(x))`` and the four shapes of head.

An encoder (any ``transformers`` BERT-like ``AutoModel``) turns token ids into one state
per token. A head ω reads some of those states:

- ``SentenceClassifier``: the [CLS] state, one label per sentence;
- ``TokenTagger``: every token's state, one label per token (first subtoken of each word);
- ``SpanExtractor``: every token's state, a start logit and an end logit per token;
- ``PairClassifier`` / regression: the [CLS] state of ``[CLS] a [SEP] b [SEP]``.

``TaskModel`` composes the two, and ``set_regime`` decides whether θ moves:
``"frozen"`` (feature-based: only ω trains) or ``"finetune"`` (everything trains).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .similarity import check_pooling, pool

IGNORE_INDEX = -100  # the label cross_entropy skips: special tokens and non-first subtokens
# What set_regime does with θ (fixed or trained); the three regimes the course compares are regimes.REGIMES.
ENCODER_REGIMES = ("frozen", "finetune")


class Head(nn.Module):
    """A head maps the encoder's token states (batch, seq, hidden) to task outputs."""

    def loss(self, logits, labels):  # pragma: no cover - overridden
        raise NotImplementedError


class SentenceClassifier(Head):
    """Reads the [CLS] state (position 0) and predicts one of ``num_labels`` classes.

    The original BERT also passes [CLS] through a "pooler" (dense + tanh) trained by
    next-sentence prediction. MLM-only encoders have no trained pooler, so the course's
    head reads [CLS]'s final state directly: the pooler's role is learned by ω (or θ).
    """

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1, pooling: str = "cls"):
        super().__init__()
        check_pooling(pooling)
        self.pooling = pooling  # "mean": the average over real tokens, what a sentence-tuned encoder offers
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, states, attention_mask=None):
        pooled = states[:, 0] if attention_mask is None else pool(states, attention_mask, self.pooling)
        return self.classifier(self.dropout(pooled))

    def loss(self, logits, labels):
        if logits.shape[-1] == 1:  # one output: regression (e.g. STS-B similarity)
            return F.mse_loss(logits.squeeze(-1), labels.float())
        return F.cross_entropy(logits, labels)


# A sentence pair is the same head over a different input: [CLS] a [SEP] b [SEP].
PairClassifier = SentenceClassifier


class TokenTagger(Head):
    """One label per token; positions labelled ``IGNORE_INDEX`` do not count in the loss."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, states, attention_mask=None):
        return self.classifier(self.dropout(states))

    def loss(self, logits, labels):
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


class SpanExtractor(Head):
    """A start logit and an end logit for every token; the answer is the best (start, end)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.qa_outputs = nn.Linear(hidden_size, 2)

    def forward(self, states, attention_mask=None):
        logits = self.qa_outputs(states)  # (batch, seq, 2)
        if attention_mask is not None:  # padding can never be an answer
            logits = logits.masked_fill(~attention_mask.bool().unsqueeze(-1), torch.finfo(logits.dtype).min)
        start, end = logits.unbind(-1)
        return torch.stack([start, end], dim=1)  # (batch, 2, seq)

    def loss(self, logits, labels):
        """``labels`` holds (start, end) token positions, shape (batch, 2)."""
        return (F.cross_entropy(logits[:, 0], labels[:, 0]) + F.cross_entropy(logits[:, 1], labels[:, 1])) / 2


class TaskModel(nn.Module):
    """``y = head(encoder(x))``: a pretrained encoder θ composed with a task head ω."""

    def __init__(self, encoder: nn.Module, head: Head):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **_):
        states = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        logits = self.head(states, attention_mask)
        loss = self.head.loss(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def set_regime(model: TaskModel, regime: str) -> TaskModel:
    """``"frozen"``: θ fixed, only the head trains. ``"finetune"``: everything trains."""
    if regime not in ENCODER_REGIMES:
        raise ValueError(f"Unknown regime {regime!r}. Known regimes: {', '.join(ENCODER_REGIMES)}.")
    for parameter in model.encoder.parameters():
        parameter.requires_grad = regime == "finetune"
    for parameter in model.head.parameters():
        parameter.requires_grad = True
    return model


def count_parameters(model: nn.Module) -> dict:
    """Total, trainable and frozen parameter counts (shared tensors counted once)."""
    seen, total, trainable = set(), 0, 0
    for parameter in model.parameters():
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        total += parameter.numel()
        trainable += parameter.numel() if parameter.requires_grad else 0
    return {"total": total, "trainable": trainable, "frozen": total - trainable}


# ----------------------------------------------------------------------------- inputs


def align_word_labels(word_ids: list, word_labels: list[int]) -> list[int]:
    """Labels per subtoken: each word's label on its first subtoken, ``IGNORE_INDEX`` on the
    rest and on special tokens. ``word_ids`` is what a fast tokenizer's ``word_ids()`` gives."""
    labels, previous = [], None
    for word in word_ids:
        if word is None or word == previous:
            labels.append(IGNORE_INDEX)
        else:
            if word >= len(word_labels):
                raise ValueError(
                    f"The tokenizer produced word {word} but only {len(word_labels)} labels were given: "
                    "tokens and labels must have the same length."
                )
            labels.append(word_labels[word])
        previous = word
    return labels


def tokenize_for_tagging(tokenizer, words: list[list[str]], word_labels=None, max_length: int = 128):
    """Tokenise pre-split words and align word labels to first subtokens."""
    if word_labels is not None and len(words) != len(word_labels):
        raise ValueError(f"{len(words)} sentences but {len(word_labels)} label lists.")
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
    if word_labels is not None:
        for i, labels in enumerate(word_labels):
            if len(labels) != len(words[i]):
                raise ValueError(
                    f"Sentence {i} has {len(words[i])} words but {len(labels)} labels."
                )
        encoded["labels"] = [align_word_labels(encoded.word_ids(i), labels) for i, labels in enumerate(word_labels)]
    return encoded


def char_span_to_tokens(encoding, index: int, char_start: int, char_end: int, sequence: int = 1):
    """Token positions (start, end) of a character span in sequence ``sequence`` of a pair."""
    start = encoding.char_to_token(index, char_start, sequence_index=sequence)
    end = encoding.char_to_token(index, char_end - 1, sequence_index=sequence)
    if start is None or end is None:
        raise ValueError("The answer span was truncated away: raise max_length.")
    return start, end
