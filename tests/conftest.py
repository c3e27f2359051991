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


@pytest.fixture(scope="session")
def paper_hub_cache(tmp_path_factory):
    """A Hugging Face hub cache holding random stand-ins for the paper profile's models
    under their real ids (``tests/paper_cache.py``); built once per session (~900 MB)."""
    import shutil

    import paper_cache

    cache = paper_cache.build(tmp_path_factory.mktemp("hf") / "hub")
    yield cache
    shutil.rmtree(cache, ignore_errors=True)  # pytest keeps its last temp folders: not these 900 MB


@pytest.fixture
def paper_hub(paper_hub_cache, monkeypatch):
    """The paper profile's hub ids resolve, offline, from ``paper_hub_cache``.

    huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE once, at import: this process
    gets its constants patched; child processes (notebook kernels) get the variables."""
    from huggingface_hub import constants

    import paper_cache

    for name, value in paper_cache.environment(paper_hub_cache).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(paper_hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for name in ("FTCOURSE_ENCODER", "FTCOURSE_RAW_ENCODER", "FTCOURSE_SENTENCE"):
        monkeypatch.delenv(name, raising=False)  # the profile's ids, through the hub path
    return paper_hub_cache


def pytest_configure(config):
    config.addinivalue_line("markers", "paper: the paper profile's code path on stand-in hub models (runs in CI)")


@pytest.fixture(autouse=True)
def session_profile():
    """Each test starts as a notebook does after ``setup()``: the environment's profile is the
    session's. A test that activates another (``setup("smoke")``) leaves none behind."""
    from ftcourse import config

    config.activate(config.profile_from_environment()[0])
    yield
    config.activate(None)


@pytest.fixture(scope="session")
def bwrap():
    """The tests that grade need the sandbox: skipped without bwrap, failed under CI=true."""
    from ftcourse.course import sandbox

    if sandbox.bwrap() is None:
        message = "bubblewrap (bwrap) is not installed: run `make system-packages`"
        pytest.fail(message) if os.environ.get("CI") == "true" else pytest.skip(message)


# transformers' from_pretrained swaps PreTrainedModel.tie_weights for a no-op while it builds a model and
# puts it back after. Two loads racing in threads can leave the no-op in place, and then every later model
# on that worker loads untied (an MLM head's decoder bias stays on the meta device), far from the cause.
from transformers.modeling_utils import PreTrainedModel as _PreTrainedModel  # noqa: E402

_TIE_WEIGHTS = _PreTrainedModel.tie_weights


@pytest.fixture(autouse=True)
def _weight_tying_restored():
    """Fail the test that leaves weight tying switched off, and switch it back for the tests after it."""
    yield
    if _PreTrainedModel.tie_weights is not _TIE_WEIGHTS:
        _PreTrainedModel.tie_weights = _TIE_WEIGHTS
        pytest.fail("this test left transformers' PreTrainedModel.tie_weights replaced (from_pretrained's "
                    "no-op): two model loads ran at once in threads; load one at a time", pytrace=False)
