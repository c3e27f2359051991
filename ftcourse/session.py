"""``ftcourse.setup()``: the first cell of every notebook."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import random
import warnings

from . import config, models

REPORTED_LIBRARIES = ("torch", "transformers", "datasets", "peft", "accelerate", "sentence-transformers")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (CPU and GPU) so a rerun gives the same numbers."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


def quiet_libraries() -> None:
    """Silence the libraries' progress bars and advice, which bury a lesson's own output."""
    import datasets
    import transformers

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars on every load
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    for name in ("sentence_transformers", "accelerate", "peft", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning)


def setup(profile=None, seed: int = 0, verbose: bool = True) -> config.Profile:
    """Seed everything, quiet the libraries and say what this run will use.

    Returns the profile, now the session's: helpers called without ``profile=`` use it. The
    profile is ``profile`` when passed, else the environment's (``config.profile_from_environment``).
    In the offline profile the hub is never contacted.
    """
    if profile is None:
        profile, reason = config.profile_from_environment()
    elif isinstance(profile, config.Profile):
        reason = "passed to setup()"
    else:
        profile, reason = config.with_model_overrides(config.get_profile(profile), os.environ), "passed to setup()"
    config.activate(profile)  # what every helper called without profile= uses from now on
    if profile.name == "offline":
        os.environ["HF_HUB_OFFLINE"] = "1"  # fail fast instead of waiting on the network
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True  # the hub libraries read the variable once, at import
    quiet_libraries()
    seed_everything(seed)
    if verbose:
        import torch

        print(f"profile: {profile.name} ({profile.description})")
        print(f"  chosen because: {reason}")
        for role, source in models.describe(profile).items():
            print(f"  {role:<12} {source}  ({models.ROLE_DESCRIPTIONS[role]})")
        if "course" in (profile.encoder, profile.raw_encoder):
            if not models.course_encoder_available():
                print("  note: the course encoder is missing, so the sentence-tuned MiniLM stands in")
            elif stats := models.course_encoder_stats():
                print(f"  the course encoder saw {stats['tokens_seen']:,} tokens in {stats['steps']:,} MLM steps")
                if "status" in stats:
                    print(f"  note: the course encoder is {stats['status']}")
        data = config.data_dir()
        print(f"data: {'local files (FTCOURSE_DATA)' if data else 'Hugging Face hub'}")
        versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in REPORTED_LIBRARIES)
        print(f"versions: {versions}")
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        print(f"GPU: {gpu}; seed: {seed}")
    return profile
