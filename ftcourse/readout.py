"""Feature-based NER: which layer of a frozen encoder is worth reading?

The BERT paper (Devlin et al. 2019, Table 7) froze BERT, fed the states of one or more
layers to a randomly initialised two-layer BiLSTM, and scored CoNLL-2003 entity F1. This
module reproduces that experiment in three steps, each cheap after the first:

1. **Extract once, cache.** ``cached_features`` runs the frozen encoder a single time over
   a split and keeps *every* layer's state (embeddings + each transformer layer) for the
   first subtoken of each word, as float16 on disk (safetensors). The file is named by a
   hash of what it was built from (model weights, tokenizer, profile, data, max_length),
   and carries that key inside, so a stale or foreign file is refused, never misread.
2. **Read out.** A readout picks layers from those states: one layer (``embeddings``,
   ``last``, ``second_to_last``, ``layer_k``), a learned scalar mix of several
   (``weighted_sum_all``, ``weighted_sum_last4``), or their concatenation (``concat_last4``).
3. **Train a small head** (the paper's BiLSTM, or a linear probe) on the cached word
   features and score it with seqeval on the whole validation split. The encoder never
   runs again: that is why a readout trains much faster than fine-tuning (lesson 2 measures by how much).

``finetune_tagger`` gives the paper's last row: the whole encoder trained with a token
classification head on the same sentences, scored the same way.

Layer numbering: 0 is the embedding output, ``k`` the output of transformer layer ``k``,
``num_layers`` the last one (what ``last_hidden_state`` holds).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from tqdm.auto import tqdm

from . import cache, config, data, heads, models, speed, training

#: Bump when the file layout changes: old caches then no longer match and are rebuilt.
FEATURES_FORMAT = 1
#: The readouts of the BERT paper's Table 7 (plus ``layer_k`` for any single layer).
PAPER_READOUTS = ("embeddings", "last", "second_to_last", "weighted_sum_all", "weighted_sum_last4", "concat_last4")
HEAD_KINDS = ("bilstm", "linear")
LSTM_LAYERS = 2  # the paper's "two-layer 768-dimensional BiLSTM"
_LAYER_NAME = re.compile(r"layer_(-?\d+)")


class ReadoutError(ValueError):
    """Base class: a readout was asked for something it cannot do; the message says the fix."""


class UnknownReadoutError(ReadoutError):
    pass


class LayerOutOfRangeError(ReadoutError, IndexError):
    pass


class LabelMismatchError(ReadoutError):
    pass


class FeatureCacheMismatchError(ReadoutError, cache.FeatureCacheMismatchError):
    pass


# ----------------------------------------------------------------------------- readouts


@dataclass(frozen=True)
class Readout:
    """Which layers a readout reads (0 = embeddings) and how it combines them:
    ``"select"`` (one layer), ``"mix"`` (a learned scalar mix) or ``"concat"``."""

    name: str
    layers: tuple
    combine: str

    def input_size(self, hidden_size: int) -> int:
        return hidden_size * len(self.layers) if self.combine == "concat" else hidden_size


def readout_names(num_layers: int) -> list[str]:
    """Every readout an encoder with ``num_layers`` transformer layers offers."""
    return [*PAPER_READOUTS, *layer_readouts(num_layers)]


def layer_readouts(num_layers: int) -> list[str]:
    """One single-layer readout per layer, embeddings (``layer_0``) to last."""
    return [f"layer_{k}" for k in range(num_layers + 1)]


def resolve_readout(name: str, num_layers: int) -> Readout:
    """The ``Readout`` called ``name`` for an encoder with ``num_layers`` layers.

    ``weighted_sum_all`` mixes the transformer layers 1..num_layers (the paper's "all 12
    layers"; the embeddings have their own row). The paper's last-four row is a plain sum;
    ``weighted_sum_last4`` starts from exactly that (uniform weights) and learns the rest.
    """
    last = num_layers
    match = _LAYER_NAME.fullmatch(name)
    if match:
        k = int(match.group(1))
        if not 0 <= k <= last:
            raise LayerOutOfRangeError(
                f"Readout {name!r}: layer {k} is out of range. This encoder has layers 0 "
                f"(embeddings) to {last} (last). Fix: use layer_0 .. layer_{last}."
            )
        return Readout(name, (k,), "select")
    if name in ("weighted_sum_last4", "concat_last4") and num_layers < 4:
        raise LayerOutOfRangeError(
            f"Readout {name!r} needs 4 transformer layers; this encoder has {num_layers}. "
            "Fix: use weighted_sum_all or a single layer."
        )
    fixed = {
        "embeddings": Readout(name, (0,), "select"),
        "last": Readout(name, (last,), "select"),
        "second_to_last": Readout(name, (last - 1,), "select"),
        "weighted_sum_all": Readout(name, tuple(range(1, last + 1)), "mix"),
        "weighted_sum_last4": Readout(name, tuple(range(last - 3, last + 1)), "mix"),
        "concat_last4": Readout(name, tuple(range(last - 3, last + 1)), "concat"),
    }
    if name not in fixed:
        raise UnknownReadoutError(
            f"Unknown readout {name!r}. Known readouts: {', '.join(PAPER_READOUTS)}, "
            f"and layer_0 .. layer_{last} for a single layer."
        )
    return fixed[name]


# ----------------------------------------------------------------------------- features


@dataclass
class WordFeatures:
    """Every layer's state for the first subtoken of each word of one split.

    ``states`` holds only the words that fit in ``max_length`` subtokens (``kept`` per
    sentence); ``labels`` holds every word's gold label, so scoring covers the whole split
    and a truncated word counts as predicted ``O``.
    """

    states: torch.Tensor  # (kept words, num_layers + 1, hidden), float16
    labels: torch.Tensor  # (all words,), label ids
    words: torch.Tensor  # (sentences,), words per sentence
    kept: torch.Tensor  # (sentences,), words with a state (the rest were truncated away)
    label_names: list
    key: dict  # what the features were built from (see ``feature_key``)
    extraction: dict = field(default_factory=dict)  # tokens and seconds of the build
    carved: bool = False  # a validation part held out of a training split (``carve``): it may choose settings

    @property
    def num_layers(self) -> int:
        return self.states.shape[1] - 1

    @property
    def hidden_size(self) -> int:
        return self.states.shape[2]

    @property
    def num_sentences(self) -> int:
        return len(self.words)

    @property
    def truncated_words(self) -> int:
        return int((self.words - self.kept).sum())

    @property
    def tokens_per_second(self) -> float:
        seconds = self.extraction.get("seconds", 0)
        return self.extraction.get("tokens", 0) / seconds if seconds else float("nan")

    def state_offsets(self) -> torch.Tensor:
        return torch.cat([torch.zeros(1, dtype=torch.long), self.kept.cumsum(0)])

    def label_offsets(self) -> torch.Tensor:
        return torch.cat([torch.zeros(1, dtype=torch.long), self.words.cumsum(0)])

    def __len__(self) -> int:  # sentences, as a split's rows
        return self.num_sentences

    @property
    def info(self):
        """The carve mark, where ``data.require_validation`` reads it on a ``datasets.Dataset``."""
        return SimpleNamespace(description=data.VALIDATION_MARK if self.carved else "")

    def select(self, sentences) -> "WordFeatures":
        """The features of these sentences (indices into this split), in that order."""
        states, labels = self.state_offsets().tolist(), self.label_offsets().tolist()
        ids = [int(i) for i in sentences]
        pick = lambda tensor, offsets: torch.cat([tensor[offsets[i]:offsets[i + 1]] for i in ids])  # noqa: E731
        return replace(self, states=pick(self.states, states), labels=pick(self.labels, labels),
                       words=self.words[ids], kept=self.kept[ids], carved=False,
                       key={**self.key, "sentences": hashlib.sha256(repr(ids).encode()).hexdigest()[:16]})

    def gold_tags(self) -> list[list[str]]:
        """The gold tag names, one list per sentence (for seqeval)."""
        offsets = self.label_offsets().tolist()
        names = [self.label_names[i] for i in self.labels.tolist()]
        return [names[offsets[i] : offsets[i + 1]] for i in range(self.num_sentences)]


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = tokenizer.get_vocab()
    text = json.dumps([type(tokenizer).__name__, len(vocab), sorted(vocab.items())[:: max(1, len(vocab) // 2000)],
                       getattr(tokenizer, "do_lower_case", None)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def data_fingerprint(words, tags) -> str:
    digest = hashlib.sha256()
    for sentence, sentence_tags in zip(words, tags):
        digest.update(("\t".join(sentence) + "\n" + ",".join(map(str, sentence_tags)) + "\n").encode())
    return digest.hexdigest()[:16]


def feature_key(model, tokenizer, dataset, split: str, profile=None, source: str | None = None) -> dict:
    """Everything the cached features depend on. Change any of it and the cache is rebuilt."""
    profile = config.get_profile(profile)
    return {
        "format": FEATURES_FORMAT,
        "model": source or getattr(model.config, "_name_or_path", "") or type(model).__name__,
        "model_fingerprint": models.fingerprint(model),
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
        "profile": profile.name,
        "split": split,
        "sentences": len(dataset),
        "data_fingerprint": data_fingerprint(dataset["tokens"], dataset["ner_tags"]),
        "max_length": profile.max_length,
    }


def cache_path(key: dict) -> Path:
    """Where the features for ``key`` live: ``<cache>/features/<model>-<split>-<hash>.safetensors``."""
    return cache.entry_path(f"{'-'.join(Path(str(key['model'])).parts[-2:])}-{key['split']}", key)


def first_subtoken_positions(word_ids: list) -> list[int]:
    """The position of each word's first subtoken (words truncated away have none)."""
    positions, previous = [], None
    for position, word in enumerate(word_ids):
        if word is not None and word != previous:
            positions.append(position)
        previous = word
    return positions


@torch.inference_mode()
def extract_features(model, tokenizer, dataset, *, max_length: int, batch_size: int = 64,
                     device: str | None = None, progress: bool = True) -> WordFeatures:
    """Run the frozen encoder once over ``dataset`` (``tokens``, ``ner_tags``) and keep
    every layer's state at each word's first subtoken. Batches hold sentences of similar
    length, padded only to the longest, so little compute is spent on padding."""
    from .data import label_names

    words, tags = list(dataset["tokens"]), list(dataset["ner_tags"])
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
    positions = [first_subtoken_positions(encoded.word_ids(i)) for i in range(len(words))]
    lengths = [len(ids) for ids in encoded["input_ids"]]
    inputs = [c for c in training.MODEL_INPUTS if c in encoded]
    device = device or next(model.parameters()).device
    model.eval()
    per_sentence = [None] * len(words)
    batches = training.length_bucketed_batches(lengths, batch_size, shuffle=False)
    start = time.perf_counter()
    for batch in tqdm(batches, desc="extracting", disable=not progress):
        rows = [{c: encoded[c][i] for c in inputs} for i in batch]
        padded = {k: v.to(device) for k, v in training.collate(rows, tokenizer.pad_token_id).items()}
        hidden = model(**padded, output_hidden_states=True).hidden_states  # num_layers + 1 of (B, T, H)
        stacked = torch.stack(hidden, dim=2)  # (B, T, layers, H)
        for row, i in enumerate(batch):
            per_sentence[i] = stacked[row, positions[i]].to(torch.float16).cpu()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return WordFeatures(
        states=torch.cat(per_sentence),
        labels=torch.tensor([t for sentence in tags for t in sentence], dtype=torch.long),
        words=torch.tensor([len(w) for w in words], dtype=torch.long),
        kept=torch.tensor([len(p) for p in positions], dtype=torch.long),
        label_names=label_names(dataset, "ner_tags"),
        key={},
        extraction={"tokens": sum(lengths), "seconds": seconds, "sentences": len(words)},
    )


def save_features(features: WordFeatures, path: Path) -> None:
    """Write features to the feature cache's file at ``path``, their key and label names inside."""
    tensors = {"states": features.states, "labels": features.labels, "words": features.words, "kept": features.kept}
    cache.save(path, tensors, features.key,
               {"label_names": list(features.label_names), "extraction": features.extraction})


def load_features(path, expected_key: dict | None = None) -> WordFeatures:
    """Read features saved by ``save_features``. With ``expected_key``, refuse a file built
    from anything else (another model, tokenizer, dataset, profile or max_length)."""
    try:
        tensors, key, metadata = cache.load(path, expected_key)
    except cache.FeatureCacheMismatchError as error:
        raise FeatureCacheMismatchError(str(error)) from None
    return WordFeatures(
        states=tensors["states"], labels=tensors["labels"], words=tensors["words"], kept=tensors["kept"],
        label_names=metadata["label_names"], key=key, extraction=metadata.get("extraction", {}),
    )


def cached_features(model, tokenizer, dataset, split: str, profile=None, *, source: str | None = None,
                    rebuild: bool = False, batch_size: int | None = None, progress: bool = True,
                    verbose: bool = True) -> WordFeatures:
    """The features of ``dataset`` (one split), extracted once and then read from the cache.

    Rebuild rule: the file name is a hash of ``feature_key`` (model weights, tokenizer,
    data, profile, max_length, file format), so any change to those builds a new file;
    ``rebuild=True`` forces a fresh extraction. Old files can be deleted at any time.
    """
    profile = config.get_profile(profile)
    key = feature_key(model, tokenizer, dataset, split, profile, source)
    path = cache_path(key)
    where = f"<cache>/features/{path.name}"
    if path.is_file() and not rebuild:
        features = load_features(path, expected_key=key)
        if verbose:
            print(f"{split}: {features.num_sentences} sentences, read from {where}")
        return features
    features = extract_features(model, tokenizer, dataset, max_length=profile.max_length,
                                batch_size=batch_size or 2 * profile.batch_size, progress=progress)
    features.key = key
    save_features(features, path)
    if verbose:
        print(f"{split}: {features.num_sentences} sentences, {features.extraction['tokens']} tokens extracted "
              f"at {features.tokens_per_second:,.0f} tokens/s, cached as {where}")
    return features


def check_compatible(train: WordFeatures, evaluation: WordFeatures) -> None:
    """Train and evaluation features must share labels and come from the same encoder."""
    if list(train.label_names) != list(evaluation.label_names):
        raise LabelMismatchError(
            f"The label sets differ: training has {train.label_names}, evaluation has "
            f"{evaluation.label_names}. Fix: load both splits from the same dataset."
        )
    for name in ("model_fingerprint", "tokenizer_fingerprint", "max_length"):
        if train.key.get(name) != evaluation.key.get(name):
            raise FeatureCacheMismatchError(
                f"Training and evaluation features differ in {name} ({train.key.get(name)!r} vs "
                f"{evaluation.key.get(name)!r}): they were built by different encoders or settings. "
                "Fix: extract both splits with the same model and profile."
            )


# ----------------------------------------------------------------------------- heads


class ScalarMix(nn.Module):
    """ELMo's scalar mix: ``gamma * sum_j softmax(w)_j * h_j``. Softmax keeps the weights
    positive and summing to one, so they read as "how much of each layer"; ``gamma`` lets
    the head rescale the result. Zero-initialised ``w`` starts as the plain average."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:  # (..., num_layers, hidden)
        if layers.shape[-2] != len(self.weights):
            raise ValueError(f"ScalarMix over {len(self.weights)} layers got {layers.shape[-2]}.")
        return self.gamma * torch.einsum("...lh,l->...h", layers, self.normalized_weights())

    def normalized_weights(self) -> torch.Tensor:
        return torch.softmax(self.weights, dim=0)


class FeatureTagger(nn.Module):
    """Readout -> [two-layer BiLSTM] -> linear classifier, one label per word.

    ``head="bilstm"`` is the paper's head (randomly initialised, ``lstm_hidden`` per
    direction); ``head="linear"`` is a probe: the classifier reads the features directly.
    """

    def __init__(self, readout: Readout, hidden_size: int, num_labels: int, head: str = "bilstm",
                 lstm_hidden: int = 256, dropout: float = 0.1):
        super().__init__()
        if head not in HEAD_KINDS:
            raise ReadoutError(f"Unknown head {head!r}. Known heads: {', '.join(HEAD_KINDS)}.")
        self.readout, self.head_kind = readout, head
        self.mix = ScalarMix(len(readout.layers)) if readout.combine == "mix" else None
        size = readout.input_size(hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.lstm = None
        if head == "bilstm":
            self.lstm = nn.LSTM(size, lstm_hidden, num_layers=LSTM_LAYERS, bidirectional=True,
                                batch_first=True, dropout=dropout)
            size = 2 * lstm_hidden
        self.classifier = nn.Linear(size, num_labels)

    def forward(self, layers: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``layers``: (batch, words, readout layers, hidden); ``lengths``: words per sentence."""
        x = self.mix(layers) if self.mix is not None else layers.flatten(-2)  # concat (or the one layer)
        x = self.dropout(x)
        if self.lstm is not None:
            # Packing keeps the backward direction from reading the padding first.
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            x, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=x.shape[1])
            x = self.dropout(x)
        return self.classifier(x)


class _Batches:
    """Padded word-feature batches of one readout, for training or prediction."""

    def __init__(self, features: WordFeatures, readout: Readout, device):
        if max(readout.layers) > features.num_layers:
            raise LayerOutOfRangeError(
                f"Readout {readout.name!r} reads layer {max(readout.layers)} but the features have "
                f"layers 0..{features.num_layers}."
            )
        # Only the readout's layers, once: later batches are cheap slices of this tensor.
        self.states = features.states[:, list(readout.layers)].to(device)
        self.device = device
        self.kept = features.kept.tolist()
        self.state_offsets = features.state_offsets().tolist()
        label_offsets = features.label_offsets().tolist()
        self.labels = [features.labels[label_offsets[i] : label_offsets[i] + k] for i, k in enumerate(self.kept)]
        self.sentences = [i for i, k in enumerate(self.kept) if k > 0]

    def batch(self, ids: list[int]):
        states = [self.states[self.state_offsets[i] : self.state_offsets[i + 1]] for i in ids]
        x = pad_sequence(states, batch_first=True).float()
        labels = pad_sequence([self.labels[i] for i in ids], batch_first=True, padding_value=heads.IGNORE_INDEX)
        lengths = torch.tensor([self.kept[i] for i in ids])
        return x, labels.to(self.device), lengths

    def order(self, batch_size: int, shuffle: bool, seed: int = 0) -> list[list[int]]:
        lengths = [self.kept[i] for i in self.sentences]
        batches = training.length_bucketed_batches(lengths, batch_size, shuffle=shuffle, seed=seed)
        return [[self.sentences[j] for j in batch] for batch in batches]


@contextmanager
def few_threads_on_cpu(device, threads: int = 1):
    """Train and run heads with one intra-op thread on a CPU. A BiLSTM step is a few small
    matmuls; spreading each over several threads costs more in synchronisation than it
    saves (measured 10x slower with 2 threads on a busy 2-core machine)."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class ReadoutResult:
    """One trained readout: its validation entity F1 (x100) and what it learned."""

    readout: str
    head: str
    f1: float
    epoch_seconds: list
    mix_weights: list | None = None  # softmax-normalised, one per layer read
    mix_layers: tuple | None = None
    gamma: float | None = None
    model: FeatureTagger | None = field(default=None, repr=False)

    @property
    def seconds_per_epoch(self) -> float:
        return sum(self.epoch_seconds) / max(len(self.epoch_seconds), 1)


def train_readout(train: WordFeatures, name: str, profile=None, *, head: str = "bilstm", epochs: int | None = None,
                  lr: float | None = None, batch_size: int | None = None, seed: int = 0, device: str | None = None,
                  progress: bool = False) -> tuple[FeatureTagger, list]:
    """Train a fresh head on cached features through readout ``name``: Adam with the profile's
    ``readout_lr`` (BiLSTM) or ``probe_lr`` (linear), ``readout_epochs`` and ``batch_size``.
    Returns the model and the seconds each epoch took."""
    profile = config.get_profile(profile)
    readout = resolve_readout(name, train.num_layers)
    device = device or models.pick_device(profile)
    torch.manual_seed(seed)  # the head's initialisation, dropout and batch order
    model = FeatureTagger(readout, train.hidden_size, len(train.label_names), head=head,
                          lstm_hidden=profile.lstm_hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr or (profile.readout_lr if head == "bilstm" else profile.probe_lr))
    data = _Batches(train, readout, device)
    with few_threads_on_cpu(device):
        epoch_seconds = _fit(model, data, optimizer, epochs or profile.readout_epochs,
                             batch_size or profile.batch_size, seed, progress)
    return model, epoch_seconds


def _fit(model: FeatureTagger, data: _Batches, optimizer, epochs: int, batch_size: int, seed: int,
         progress: bool) -> list:
    """The training loop proper; returns the seconds each epoch took."""
    loss_fn = nn.CrossEntropyLoss(ignore_index=heads.IGNORE_INDEX)
    epoch_seconds = []
    for epoch in tqdm(range(epochs), desc=f"{model.readout.name} ({model.head_kind})", disable=not progress):
        model.train()
        start = time.perf_counter()
        for ids in data.order(batch_size, shuffle=True, seed=seed + epoch):
            x, labels, lengths = data.batch(ids)
            logits = model(x, lengths)
            loss = loss_fn(logits.flatten(0, 1), labels.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)  # LSTMs occasionally spike early on
            optimizer.step()
        epoch_seconds.append(time.perf_counter() - start)
    return epoch_seconds


@torch.inference_mode()
def predict_tags(model: FeatureTagger, features: WordFeatures, batch_size: int = 256) -> list[list[str]]:
    """Predicted tag names for every word of every sentence; words truncated away get ``O``."""
    model.eval()
    device = next(model.parameters()).device
    data = _Batches(features, model.readout, device)
    predicted = [[] for _ in range(features.num_sentences)]
    with few_threads_on_cpu(device):
        for ids in data.order(batch_size, shuffle=False):
            x, _, lengths = data.batch(ids)
            best = model(x, lengths).argmax(-1).cpu()
            for row, i in enumerate(ids):
                predicted[i] = [features.label_names[j] for j in best[row, : lengths[row]].tolist()]
    outside = _outside_tag(features.label_names)
    return [tags + [outside] * (int(n) - len(tags)) for tags, n in zip(predicted, features.words)]


def _outside_tag(label_names) -> str:
    if "O" not in label_names:
        raise LabelMismatchError(f"The labels {label_names} have no 'O' tag: is this an IOB tag set?")
    return "O"


def entity_f1_x100(gold: list[list[str]], predicted: list[list[str]]) -> float:
    """Entity-level F1 x100 (seqeval, conlleval rules), as the CoNLL-2003 papers report it
    (``regimes.entity_f1_fraction`` scores a tagger model on the 0..1 scale)."""
    from seqeval.metrics import f1_score

    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones.")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"Sentence {i}: {len(g)} gold tags but {len(p)} predicted ones.")
    return 100 * f1_score(gold, predicted)


def evaluate_readout(train: WordFeatures, validation: WordFeatures, name: str, profile=None, *,
                     head: str = "bilstm", seed: int = 0, **kwargs) -> ReadoutResult:
    """Train readout ``name`` with ``head`` on ``train`` and score it on all of ``validation``."""
    check_compatible(train, validation)
    model, epoch_seconds = train_readout(train, name, profile, head=head, seed=seed, **kwargs)
    f1 = entity_f1_x100(validation.gold_tags(), predict_tags(model, validation))
    result = ReadoutResult(name, head, f1, epoch_seconds, model=model.cpu())
    if model.mix is not None:
        result.mix_weights = model.mix.normalized_weights().tolist()
        result.mix_layers = model.readout.layers
        result.gamma = model.mix.gamma.item()
    return result


def evaluate_readouts(train: WordFeatures, validation: WordFeatures, names, profile=None, *,
                      head: str = "bilstm", seed: int = 0, progress: bool = True, lrs: dict | None = None) -> dict:
    """``evaluate_readout`` for each name. Names are checked up front, so a typo fails before
    any training; names for the same layers (``last`` and ``layer_6`` of a 6-layer encoder)
    are trained once and share the result. ``lrs``: each name's own rate (``choose_readout_lrs``);
    a name not in it trains at the profile's."""
    resolved = {name: resolve_readout(name, train.num_layers) for name in names}
    results, trained = {}, {}
    bar = tqdm(names, desc=f"readouts ({head})", disable=not progress)
    for name in bar:
        bar.set_postfix(readout=name)
        same = (resolved[name].layers, resolved[name].combine)
        if same not in trained:
            trained[same] = evaluate_readout(train, validation, name, profile, head=head, seed=seed,
                                             lr=(lrs or {}).get(name))
        results[name] = replace(trained[same], readout=name)
    return results


def evaluate_readouts_over_seeds(train: WordFeatures, validation: WordFeatures, names, profile=None, *,
                                 head: str = "bilstm", seeds=(0,), progress: bool = True,
                                 lrs: dict | None = None) -> dict:
    """``evaluate_readouts`` once per seed (the head's initialisation, dropout and batch order):
    ``{name: {seed: ReadoutResult}}``, what ``compare_readouts`` pairs. ``lrs``: as there."""
    runs: dict = {}
    for seed in seeds:
        for name, result in evaluate_readouts(train, validation, names, profile, head=head, seed=seed,
                                              progress=progress, lrs=lrs).items():
            runs.setdefault(name, {})[seed] = result
    return runs


def carve(features: WordFeatures, size: int, seed: int = 0) -> tuple[WordFeatures, WordFeatures]:
    """``(rest, validation)``: ``size`` sentences of a training split's features held out, drawn as
    ``data.carve_validation`` draws rows. ``validation`` carries the carve mark, so it may choose
    settings; ``rest`` is what the head trains on while they are chosen."""
    import datasets

    rest, held = data.carve_validation(datasets.Dataset.from_dict({"i": list(range(features.num_sentences))}), size,
                                       seed)
    return features.select(rest["i"]), replace(features.select(held["i"]), carved=True)


@dataclass(frozen=True)
class ReadoutRates:
    """Each readout's rate, chosen on a carved validation part: ``{name: GridResult}`` (F1 x100)."""

    by_name: dict

    @property
    def lrs(self) -> dict:
        return {name: found.best for name, found in self.by_name.items()}

    def line(self) -> str:
        """One entry per search; names for the same layers (``last`` = ``layer_6``) are joined by ``=``."""
        searches: dict = {}
        for name, found in self.by_name.items():
            searches.setdefault(id(found), (found, []))[1].append(name)
        return "lr chosen per readout on validation (F1 x100): " + "; ".join(
            " = ".join(names) + " " + found.line("{:.1f}") for found, names in searches.values())


def choose_readout_lrs(rest: WordFeatures, validation: WordFeatures, names, profile=None, *, head: str = "bilstm",
                       grid=None, seed: int = 0, progress: bool = True) -> ReadoutRates:
    """Each readout's own Adam rate: its head trained on ``rest`` at each rate of ``grid``
    (default the profile's ``readout_lr`` / 3, x1, x3), scored on ``validation`` (carved from the
    training split by ``carve``, never the split the lesson reports), the grid extended past an
    edge its best sits on (``experiments.grid.search``). A four-times-wider input (``concat_last4``)
    or a learned mix may want another rate than a single layer: each readout gets its own, so the
    comparison between them is not decided by one shared rate. Names for the same layers share one
    search."""
    from .experiments import grid as grid_search

    data.require_validation(validation, "readout.choose_readout_lrs")
    profile = config.get_profile(profile)
    base = profile.readout_lr if head == "bilstm" else profile.probe_lr
    resolved = {name: resolve_readout(name, rest.num_layers) for name in names}
    found, by_name = {}, {}
    for name in tqdm(names, desc=f"readout lr ({head})", disable=not progress):
        same = (resolved[name].layers, resolved[name].combine)
        if same not in found:
            found[same] = grid_search.search(
                lambda lr: evaluate_readout(rest, validation, name, profile, head=head, seed=seed, lr=lr).f1,
                grid or (base / 3, base, base * 3), step=3.0)
        by_name[name] = found[same]
    return ReadoutRates(by_name)


def seed_means(runs: dict) -> dict:
    """``{name: ReadoutResult}`` with each readout's F1 the mean over its seeds (its other fields,
    the mix weights among them, are the first seed's)."""
    return {name: replace(next(iter(by_seed.values())), f1=sum(r.f1 for r in by_seed.values()) / len(by_seed))
            for name, by_seed in runs.items()}


def compare_readouts(runs: dict, a: str, b: str):
    """Readout ``a`` against ``b``: the paired difference of their F1 over the seeds
    (``experiments.compare.paired``, in F1 points, with its 95% interval)."""
    from .experiments.compare import paired

    return paired({s: r.f1 for s, r in runs[a].items()}, {s: r.f1 for s, r in runs[b].items()}, a, b, scale=1.0)


def best_readout(runs: dict, names) -> tuple[str, list[str]]:
    """The readout of ``names`` with the highest mean F1, and the others it does not beat by the
    paired difference over seeds (tied with it for best)."""
    means = seed_means({name: runs[name] for name in names})
    best = max(names, key=lambda name: means[name].f1)
    return best, [name for name in names if name != best and compare_readouts(runs, best, name).outcome != "beats"]


def paper_claims_table(paper: dict, runs: dict, finetuned_f1: float, readouts=PAPER_READOUTS):
    """The BERT paper's four claims about the readouts, each checked on this run by the paired
    difference over the seeds: "tie" where the interval holds zero (the run neither confirms nor
    contradicts the paper). Fine-tuning is one run, set against the best readout's interval."""
    from .experiments.compare import mean_interval
    from .report import Table

    frozen = list(readouts)
    paper_best = max(frozen, key=paper.get)
    best, level = best_readout(runs, frozen)
    second = compare_readouts(runs, "second_to_last", "last")
    above_embeddings = [compare_readouts(runs, name, "embeddings").outcome for name in frozen[1:]]
    _, _, best_high = mean_interval([r.f1 for r in runs[best].values()], scale=1.0)

    def said(outcome: str) -> str:
        return {"beats": "yes", "trails": "no", "tie": "tie", "undecided": "undecided"}[outcome]

    claims = [
        ("second-to-last beats last", paper["second_to_last"] > paper["last"], said(second.outcome), second.verdict),
        ("concat-last-4 is the best frozen readout", paper_best == "concat_last4",
         "yes" if best == "concat_last4" and not level else ("tie" if "concat_last4" in [best, *level] else "no"),
         f"best mean: {best}" + (f"; not beaten by it: {', '.join(level)}" if level else "")),
        ("every readout beats the embeddings", all(paper[n] > paper["embeddings"] for n in frozen[1:]),
         "yes" if all(o == "beats" for o in above_embeddings) else
         ("no" if "trails" in above_embeddings else "tie"), ""),
        ("fine-tuning beats the best frozen readout", paper["finetune"] > paper[paper_best],
         "yes" if finetuned_f1 > best_high else "no", f"one fine-tuning run against {best}'s interval (high {best_high:.1f})"),
    ]
    rows = [[claim, "yes" if says else "no", run, "agrees" if run == ("yes" if says else "no") else
             ("not resolved (a tie)" if run in ("tie", "undecided") else "DISAGREES"), how]
            for claim, says, run, how in claims]
    return Table(["claim", "paper", "this run", "verdict", "how"], rows,
                 notes=[f"paired over {len(next(iter(runs.values())))} seeds of each readout's head, 95% CI"])


# ----------------------------------------------------------------------------- fine-tuning


def tokenized_for_tagging(tokenizer, dataset, max_length: int):
    """A ``datasets.Dataset`` of input ids and first-subtoken labels, as ``training`` wants."""
    import datasets

    encoded = heads.tokenize_for_tagging(tokenizer, list(dataset["tokens"]), list(dataset["ner_tags"]),
                                         max_length=max_length)
    columns = [c for c in (*training.MODEL_INPUTS, "labels") if c in encoded]
    return datasets.Dataset.from_dict({c: encoded[c] for c in columns}), encoded


@dataclass
class FinetuneResult:
    f1: float
    history: training.History
    model: nn.Module = field(repr=False)

    @property
    def seconds_per_epoch(self) -> float:
        return self.history.seconds_per_epoch


def finetune_tagger(encoder, tokenizer, conll, profile=None, *, seed: int = 0, epochs: int | None = None,
                    progress: bool = True) -> FinetuneResult:
    """The paper's last row: ``encoder`` (trained in place) plus a token-classification
    head, fine-tuned on ``conll["train"]`` with the profile's ``finetune_lr`` (``head_lr`` for
    the new head) and scored like the readouts: each word's tag is its first subtoken's, over
    all of validation. Trains for ``epochs``, by default the profile's ``finetune_epochs``."""
    from .data import label_names

    profile = config.get_profile(profile)
    names = label_names(conll["train"], "ner_tags")
    if label_names(conll["validation"], "ner_tags") != names:
        raise LabelMismatchError(
            f"The label sets differ: train has {names}, validation has "
            f"{label_names(conll['validation'], 'ner_tags')}. Fix: load both splits from the same dataset."
        )
    model = heads.set_regime(heads.TaskModel(encoder, heads.TokenTagger(encoder.config.hidden_size, len(names))),
                             "finetune")
    train_data, _ = tokenized_for_tagging(tokenizer, conll["train"], profile.max_length)
    valid_data, encoded = tokenized_for_tagging(tokenizer, conll["validation"], profile.max_length)
    # The new head starts random: it gets the bigger head_lr, as in the exercise.
    recipe = training.TrainConfig(lr=profile.finetune_lr, head_lr=profile.head_lr,
                                  epochs=epochs or profile.finetune_epochs,
                                  batch_size=profile.batch_size, seed=seed, progress=progress)
    history = training.train(model, train_data, recipe, pad_token_id=tokenizer.pad_token_id)
    logits, _ = training.predict(model, valid_data, recipe.eval_batch_size, tokenizer.pad_token_id)
    gold = [[names[t] for t in tags] for tags in conll["validation"]["ner_tags"]]
    predicted = []
    for i, sentence_logits in enumerate(logits):
        best = sentence_logits.argmax(-1).tolist()
        tags = [names[best[p]] for p in first_subtoken_positions(encoded.word_ids(i))]
        predicted.append(tags + ["O"] * (len(gold[i]) - len(tags)))
    return FinetuneResult(entity_f1_x100(gold, predicted), history, model)


# ----------------------------------------------------------------------------- speed


def extraction_flops_per_second(model_config, features: WordFeatures) -> float:
    """The FLOP/s the extraction of ``features`` reached (from its recorded tokens and time)."""
    tokens, seconds = features.extraction.get("tokens", 0), features.extraction.get("seconds", 0)
    sentences = features.extraction.get("sentences", 0) or features.num_sentences
    if not seconds:
        return float("nan")
    return speed.encoder_flops(model_config, tokens, tokens / sentences) / seconds


def plot_depth_curves(curves: dict, ylabel: str = "dev entity F1", ax=None):
    """One line per encoder, ``{label: (num_layers, [score at layer 0 .. num_layers])}``,
    against relative depth (layer / num_layers; 0 = the embeddings, 1 = the last layer), so
    encoders of different depths share one axis. Each line's peak is marked."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    for label, (num_layers, scores) in curves.items():
        if len(scores) != num_layers + 1:
            raise LayerOutOfRangeError(f"{label!r}: {len(scores)} scores for {num_layers} layers; expected "
                                       f"{num_layers + 1} (the embeddings and every layer).")
        depth = [k / num_layers for k in range(num_layers + 1)]
        line, = ax.plot(depth, scores, marker="o", label=f"{label}, {num_layers} layers")
        top = max(range(num_layers + 1), key=scores.__getitem__)
        ax.plot(depth[top], scores[top], marker="*", markersize=14, color=line.get_color())
    ax.set(xlabel="depth read (0 = embeddings, 1 = last layer; a star marks each peak)", ylabel=ylabel)
    ax.legend(loc="lower center")
    ax.grid(True, alpha=0.3)
    return ax


def plot_layer_curves(curves: dict, peak: int | None = None):
    """Dev entity F1 against the layer read, one line per head (``{head: [F1 at layer 0 ..
    last]}``), with a dotted line at ``peak`` (the BiLSTM's best layer)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    layers = list(range(len(next(iter(curves.values())))))
    for head, values in curves.items():
        ax.plot(layers, values, marker="o", label=head)
    if peak is not None:
        ax.axvline(peak, color="grey", linestyle=":", label="peak (BiLSTM)")
    ax.set_xticks(layers, ["emb"] + [str(k) for k in layers[1:]])
    ax.set_xlabel("layer read (emb = embedding output)")
    ax.set_ylabel("dev entity F1")
    ax.legend()
    plt.tight_layout()
    return fig


def plot_mix_weights(results: dict, num_layers: int):
    """One bar chart per scalar-mix readout (``{name: ReadoutResult}``): the softmax weight of
    each layer read, a dashed line at the uniform weight, and gamma in the title."""
    import matplotlib.pyplot as plt

    widths = [max(num_layers, 4) if i == 0 else 4 for i in range(len(results))]
    fig, axes = plt.subplots(1, len(results), figsize=(10, 3.2), gridspec_kw={"width_ratios": widths})
    for ax, (name, result) in zip(axes, results.items()):
        ax.bar([str(k) for k in result.mix_layers], result.mix_weights)
        ax.axhline(1 / len(result.mix_layers), color="grey", linestyle="--")
        ax.set_title(f"{name} (gamma {result.gamma:.2f})")
        ax.set_xlabel("layer")
    axes[0].set_ylabel("softmax weight")
    plt.tight_layout()
    return fig


def heaviest_layer(result: ReadoutResult) -> int:
    """The layer a scalar-mix readout weighs most."""
    return result.mix_layers[max(range(len(result.mix_weights)), key=result.mix_weights.__getitem__)]


# ----------------------------------------------------------------------------- against the paper


def gaps_to_finetuning(f1: dict, readouts=PAPER_READOUTS) -> dict:
    """How many F1 points each frozen readout gives up against fine-tuning (``f1["finetune"]``)."""
    return {name: f1["finetune"] - f1[name] for name in readouts}


def plot_gaps_to_finetuning(paper: dict, measured: dict, readouts=PAPER_READOUTS, ax=None):
    """Each frozen readout's gap to fine-tuning, the paper's beside this run's, on one axis that
    starts at zero: the shorter the bar, the closer the readout comes to moving the encoder. F1
    itself would need an axis from 0 to 100, where the paper's 91-96 ordering cannot be seen."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    gaps = {"paper (bert-base)": gaps_to_finetuning(paper, readouts), "this run (BiLSTM)": gaps_to_finetuning(measured, readouts)}
    height = 0.38
    for offset, (label, values) in enumerate(gaps.items()):
        ax.barh([i + (offset - 0.5) * height for i in range(len(readouts))], [values[n] for n in readouts], height,
                label=label)
    ax.set_yticks(range(len(readouts)), readouts)
    ax.invert_yaxis()  # the paper's table order, top to bottom
    ax.set_xlabel("F1 points below fine-tuning (CoNLL-2003 dev)")
    ax.set_title("What freezing the encoder costs, readout by readout")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)  # below: never over a bar
    plt.tight_layout()
    return ax


def differing_orderings(paper: dict, measured: dict) -> list[str]:
    """Every pair of rows whose order differs between the paper and this run, as
    ``"a > b in the paper, b > a here"``; a tie on either side counts as no order."""
    names = [n for n in paper if n in measured]
    lines = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            paper_order, run_order = paper[a] - paper[b], measured[a] - measured[b]
            if paper_order * run_order < 0:
                high, low = (a, b) if paper_order > 0 else (b, a)
                lines.append(f"{high} > {low} in the paper ({paper[high]:.1f} vs {paper[low]:.1f}), "
                             f"{low} > {high} here ({measured[low]:.1f} vs {measured[high]:.1f})")
    return lines


def layer_worth_reading(curves: dict, within: float = 1.0) -> tuple[list[int], dict]:
    """The layers every head reads within ``within`` F1 of its own best layer (``curves``:
    ``{head: [F1 at layer 0 .. last]}``), and each head's peak. Two heads may peak one layer
    apart on noise; the layers they both read near their best are what they agree on."""
    peaks = {head: max(range(len(f1s)), key=f1s.__getitem__) for head, f1s in curves.items()}
    near = [{k for k, f1 in enumerate(f1s) if f1 >= f1s[peaks[head]] - within} for head, f1s in curves.items()]
    return sorted(set.intersection(*near)), peaks
