import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if not os.environ.get("FTCOURSE_DATA") and (SHARED / "datasets").is_dir():
    os.environ["FTCOURSE_DATA"] = str(SHARED / "datasets")
if not os.environ.get("FTCOURSE_CORPUS") and (SHARED / "corpus").is_dir():
    os.environ["FTCOURSE_CORPUS"] = str(SHARED / "corpus")


@pytest.fixture
def shared_data():
    """The offline benchmarks folder; tests that need the real files skip without it."""
    folder = os.environ.get("FTCOURSE_DATA")
    if not folder or not Path(folder).is_dir():
        pytest.skip("FTCOURSE_DATA is not set to the benchmarks folder")
    return Path(folder)


@pytest.fixture
def tiny_bert():
    """A randomly initialised 2-layer BERT with the real vocabulary: fast and offline."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128)
    return BertModel(config, add_pooling_layer=False)


@pytest.fixture
def tokenizer():
    from ftcourse import models

    return models.load_tokenizer("sentence")
