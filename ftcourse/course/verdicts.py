"""The grader's verdicts, computed in the grader's own process from what crossed the sandbox as data.

The evidence kernel (``ftcourse.course.evidence``, inside the sandbox) calls the submission's
functions and writes what they produced into a size-capped folder: JSON records and
safetensors weights. Nothing in that folder is trusted: the submission shares a process with
the code that wrote it and could have written anything. This module never runs submission code.
It reads the folder as hostile data (regular files only, never a link, each within a cap; JSON
parsed only within caps on its values and nesting too) and
**recomputes** every figure it judges from the course's own code:

- *LoRA on bert-base*: it builds bert-base-uncased's architecture itself, applies the LoRA
  configuration the submission's ``add_lora`` used (read back from peft's config), and counts;
  the parameters ``add_lora`` returned must be exactly the ones that configuration gives;
- *the regimes*: it builds each regime's model from the course's code (the pretrained encoder,
  a ``SentenceClassifier``, ``set_regime`` or peft at r=8 on query and value); the submission's
  model must have the same parameters, and exactly the ones the regime trains must train;
- *the student's loop, and each measured run*: it loads the weights the run changed into that reference model, and checks
  that training happened (every parameter the regime trains changed, and the change is a descent step:
  from the run's recorded start, whose pretrained part must be the grader's own, the change agrees with
  the negative gradient of the training loss on the grader's examples far beyond what a random change
  would: ``descent``; for the student's loop, the change also fits the grader's training examples: their
  losses fall faster along it than those of sentences the run cannot have seen, ``fit``),
  that nothing frozen moved (every other parameter is byte for byte the pretrained one: its digest matches), re-scores the
  model with the course's ``predict`` on the grader's own dev set, and requires the reported
  accuracy to be that accuracy (within one example) and the reported trainable count to be the
  reference's;
- *the seed summary*: ``summarize``'s answers on the grader's examples, against its own arithmetic.

A check passes only on such a positive, recomputed result; a missing or malformed record fails
it, saying what was missing. What the grader cannot recompute (seconds per epoch, peak memory) is
only required to be a sensible number.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from .checks import BERT_BASE_LORA_PARAMETERS, BERT_BASE_LORA_PERCENT, LORA_RANK, LORA_TARGETS, RESULT_KEYS
from .evidence import is_new_parameter

#: Caps on what the grader reads back from the evidence folder.
MAX_JSON_BYTES = 64 * 2**20
MAX_WEIGHTS_BYTES = 1024 * 2**20
#: Caps on a JSON record's values (every object, array, key, string, number...) and its nesting, checked
#: before it is parsed: within the byte cap, 60 MiB of ``[[],[],...]`` is gigabytes of Python objects.
#: The records the grader asks for hold a few tens of thousands (the paper profile's stability runs).
MAX_JSON_VALUES = 200_000
MAX_JSON_DEPTH = 32
#: The descent check (``descent``): the grader's training examples its loss gradient is computed on, and
#: how far (in standard deviations of a random change) a run's change must sit from a random one to pass.
#: Planted noise sits within about 1.5; honest runs, at the smoke and grading profiles, from hundreds
#: (fine-tuning) down to about 4 (the head alone, 770 coordinates, at its large rate: at the grading
#: profile 12 data orders gave 3.7 to 16.4). Between DESCENT_REVIEW_Z and DESCENT_MIN_Z the change is
#: more than noise but less than training usually gives: the part goes to the instructor (REVIEW), so an
#: honest head trained in an unlucky order is never failed by this check alone.
DESCENT_EXAMPLES = 256
DESCENT_MIN_Z = 4.0
DESCENT_REVIEW_Z = 2.0
#: The fit check (``fit``, part 3 only): how many held-out sentences it compares the training examples
#: with (4 per training example, up to 512: past 4, the test's effective size n1 n2 / (n1 + n2) is within
#: 20% of its ceiling n1, and each sentence costs a forward pass), and the least z that passes. Honest
#: loops (frozen, fine-tuned) read 2.5 to 6.5 over 8 data orders at the grading profile (128 examples, 512
#: held out) and 3.3 to 4.6 at smoke (32 examples, 128 held out); a loop that kept 2 of the sentences
#: reads -1.1 to 1.4. LoRA runs (part 4) dip to 2.4, too close to the line, and a tiny subset there already
#: fails descent, so parts 4 and 5 skip this check.
FIT_HELD_OUT_PER_EXAMPLE = 4
FIT_HELD_OUT = 512
FIT_MIN_Z = 2.0


class EvidenceMissing(Exception):
    """A record the verdict needs is not in the evidence folder, or is not what it should be."""


class ForReview(EvidenceMissing):
    """Evidence the grader cannot decide on alone: the part goes to the instructor as REVIEW."""


class DescentUnclear(ForReview):
    """A run's change sits between DESCENT_REVIEW_Z and DESCENT_MIN_Z from a random one."""


class TwoViewsDisagree(ForReview):
    """Two views of one model the evidence recorded disagree (its own ``named_parameters`` and a walk of
    its modules' own dictionaries): something in the submission's process changed what one of them shows.
    The part goes to the instructor as REVIEW."""


class FitUnclear(ForReview):
    """A descent step that fits the grader's training examples no better than sentences it never saw."""


class HeldOutGap(ForReview):
    """A run scores far better on the dev set the sandbox holds than on the grader's held-out sentences,
    which it never had: trained on the dev set? The part goes to the instructor as REVIEW."""


class StudentRaised(EvidenceMissing):
    """The student's function raised: ``what`` was called, ``ename`` and ``evalue`` are what it raised."""

    def __init__(self, what: str, ename: str, evalue: str):
        super().__init__(f"{what} raised {ename}: {evalue}")
        self.what, self.ename, self.evalue = what, ename, evalue


def raised(record, what: str) -> None:
    """Raise ``StudentRaised`` if ``record`` says the call raised."""
    error = record.get("error") if isinstance(record, dict) else None
    if error is not None:
        error = error if isinstance(error, dict) else {}
        raise StudentRaised(what, str(error.get("ename", "Exception")), str(error.get("evalue", "")))


def _read(path: Path, cap: int) -> bytes:
    """A regular file's bytes, never following a link, at most ``cap`` (``sandbox.read_untrusted``, the
    reader of submissions too), its refusals named as missing evidence."""
    from .sandbox import NotReadable, read_untrusted

    try:
        return read_untrusted(path, cap)
    except FileNotFoundError:
        raise EvidenceMissing(f"no {path.name} was written") from None
    except NotReadable as refusal:
        raise EvidenceMissing(f"{path.name}: {refusal}") from None


#: A JSON string literal, escapes included.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def _within_bounds(data: bytes, name: str) -> None:
    """Refuse (``EvidenceMissing``) a record of more than ``MAX_JSON_VALUES`` values or nested deeper than
    ``MAX_JSON_DEPTH``, counted on its bytes before any object is made, every string emptied and the
    whitespace dropped: one value for the document, one after each comma and each colon, one more in each
    array or object that is not empty; each bracket opens a level."""
    bare = _JSON_STRING.sub(b'""', data).translate(None, b" \t\n\r")
    opened = bare.count(b"[") + bare.count(b"{")
    values = 1 + bare.count(b",") + bare.count(b":") + opened - bare.count(b"[]") - bare.count(b"{}")
    if values > MAX_JSON_VALUES:
        raise EvidenceMissing(f"{name} holds {values:,} JSON values, more than the {MAX_JSON_VALUES:,} the grader "
                              "reads in a record (far more than any record it asks for): refused unparsed")
    depth = 0
    for byte in bare.translate(None, _NOT_BRACKET):
        depth += 1 if byte in b"[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise EvidenceMissing(f"{name} nests deeper than the {MAX_JSON_DEPTH} levels the grader reads in a "
                                  "record (far deeper than any record it asks for): refused unparsed")


def read_json(folder: Path, name: str):
    """A JSON record of the evidence folder: read within ``MAX_JSON_BYTES``, parsed only within
    ``MAX_JSON_VALUES`` and ``MAX_JSON_DEPTH``; anything else is ``EvidenceMissing``, never the grader's failure."""
    data = _read(Path(folder) / name, MAX_JSON_BYTES)
    _within_bounds(data, name)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise EvidenceMissing(f"{name} is not JSON ({type(error).__name__})") from None


def read_weights(folder: Path, name: str) -> dict:
    from safetensors.torch import load

    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise EvidenceMissing(f"a weights file named {name!r}")
    try:
        return load(_read(Path(folder) / name, MAX_WEIGHTS_BYTES))
    except EvidenceMissing:
        raise
    except Exception as error:  # a malformed file: safetensors refuses it
        raise EvidenceMissing(f"{name} is not a safetensors file ({type(error).__name__})") from None


def canonical(name: str) -> str:
    """A parameter's name with peft's wrapping removed, so that a peft model and the course's
    reference name the same weight the same way."""
    return name.replace("base_model.model.", "").replace(".base_layer.", ".")


def _listing(record) -> dict:
    """canonical name -> (shape, trains), from a record's ``parameters``."""
    if not isinstance(record, list):
        raise EvidenceMissing("no parameter list was recorded")
    found = {}
    for entry in record:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            raise EvidenceMissing("the parameter list is malformed")
        found[canonical(entry[0])] = (tuple(int(n) for n in entry[1]), bool(entry[2]))
    return found


def _few(names, n: int = 3) -> str:
    names = sorted(names)
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


# ----------------------------------------------------------------------------- the course's reference models


def lora_settings(config) -> dict:
    """The LoRA configuration a record gives, validated: the rank, targets and scaling the grader
    rebuilds with. Raises ``EvidenceMissing`` naming what is wrong."""
    if not isinstance(config, dict):
        raise EvidenceMissing("the encoder is not a peft model (no peft_config): wrap it with "
                              "peft.get_peft_model(encoder, LoraConfig(...))")
    rank, alpha, dropout = config.get("r"), config.get("lora_alpha"), config.get("lora_dropout")
    targets = config.get("target_modules")
    if isinstance(targets, str) or not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise EvidenceMissing(f"LoRA's target_modules should be a list of module names, found {targets!r}")
    if not (isinstance(rank, int) and 0 < rank <= 256):
        raise EvidenceMissing(f"LoRA's rank r should be a small positive integer, found {rank!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha <= 1e4):
        raise EvidenceMissing(f"lora_alpha should be a positive number, found {alpha!r}")
    if not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
        raise EvidenceMissing(f"lora_dropout should be in [0, 1), found {dropout!r}")
    for name, allowed in (("bias", ("none",)), ("use_rslora", (False, None)), ("use_dora", (False, None)),
                          ("fan_in_fan_out", (False, None)), ("modules_to_save", (None, [])),
                          ("layers_to_transform", (None,))):
        if config.get(name) not in allowed:
            raise EvidenceMissing(f"LoRA's {name} should be {allowed[0]!r} for this exercise, found {config.get(name)!r}")
    return {"r": rank, "lora_alpha": float(alpha), "lora_dropout": float(dropout), "target_modules": sorted(targets)}


def with_lora(model, settings: dict):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=settings["r"], lora_alpha=settings["lora_alpha"],
                                            lora_dropout=settings["lora_dropout"],
                                            target_modules=list(settings["target_modules"])))


def _course_lora(settings: dict) -> None:
    """The exercise's LoRA: rank 8 on query and value (the scaling alpha / r is the student's choice)."""
    if settings["r"] != LORA_RANK or sorted(settings["target_modules"]) != sorted(LORA_TARGETS):
        raise EvidenceMissing(f"LoRA should be rank {LORA_RANK} on {list(LORA_TARGETS)}, found rank "
                              f"{settings['r']} on {settings['target_modules']}")


@dataclass
class Reference:
    """What the grader builds for a profile: the exercise's dev set and the pretrained encoder."""

    profile: object
    tokenizer: object
    dev_set: object
    pretrained: dict  # canonical name -> digest, the pretrained encoder's parameters
    num_labels: int
    train_batch: dict | None = None  # the grader's own training examples, collated: the descent check's loss
    held_out: object = None  # dev sentences the sandbox never holds: the score a submission cannot train on
    train_set: object = None  # the grader's training examples, tokenised: the fit check's per-example slopes

    def model(self, regime: str, lora: dict | None = None):
        from .. import models
        from ..heads import SentenceClassifier, TaskModel, set_regime

        torch.manual_seed(0)
        encoder = models.load_encoder(self.profile, add_pooling_layer=False)  # one load at a time: models._load
        if regime == "lora":
            encoder = with_lora(encoder, lora)
        model = TaskModel(encoder, SentenceClassifier(encoder.config.hidden_size, num_labels=self.num_labels))
        if regime != "lora":
            set_regime(model, regime)
        return model


_references: dict = {}
_lock = threading.Lock()
_descent_lock = threading.Lock()


def grader_split(profile):
    """SST-2 as the grader splits it: ``(train, dev, held_out)``, untokenised. ``train`` is the exercise's
    training subset (``exercise_train_size``, seeded as ``data.subsample`` draws it); ``dev`` the dev sentences
    the sandbox gets (``exercise_eval_size``, at most half of GLUE's dev set); ``held_out`` the rest of the dev
    set, which only the grader reads: the score a submission cannot have trained on."""
    from .. import data

    sst2 = data.load_sst2(profile, full=True)
    shuffled, n = sst2["validation"].shuffle(seed=0), len(sst2["validation"])  # data.subsample's order
    k = min(profile.exercise_eval_size or n, n // 2)
    return (data.subsample(sst2["train"], profile.exercise_train_size),
            shuffled.select(range(k)).flatten_indices(), shuffled.select(range(k, n)).flatten_indices())


def reference(profile) -> Reference:
    """The grader's ``Reference`` for ``profile`` (built once per profile and process)."""
    from .. import data, models
    from ..session import quiet_libraries
    from .evidence import digests

    quiet_libraries()
    with _lock:
        if profile.name in _references and _references[profile.name].profile == profile:
            return _references[profile.name]
        splits = grader_split(profile)  # what the sandbox holds (train, dev), and what it never sees (held_out)
        num_labels = splits[0].features["label"].num_classes
        tokenizer = models.load_tokenizer(profile=profile)
        train, dev, held_out = (split.map(lambda b: tokenizer(b["sentence"], truncation=True,
                                                              max_length=profile.max_length),
                                          batched=True, remove_columns=["sentence"]).rename_column("label", "labels")
                                for split in splits)
        encoder = models.load_encoder(profile, add_pooling_layer=False)
        pretrained = {canonical("encoder." + n): d for n, d in digests(encoder).items()}
        from ..training import collate

        batch = collate(train.select(range(min(DESCENT_EXAMPLES, len(train)))).to_list(), tokenizer.pad_token_id or 0)
        found = Reference(profile, tokenizer, dev, pretrained, num_labels, batch, held_out, train)
        _references[profile.name] = found
        return found


class ReferenceUnavailable(RuntimeError):
    """What the verdicts need in the grader's own process (the dev set, the pretrained encoder) cannot be had;
    the message says what is missing and the setting that fixes it."""


#: How long the grader waits for the Hugging Face hub to answer before it calls it unreachable.
HUB_PROBE_SECONDS = 3.0


def hub_unreachable(timeout: float = HUB_PROBE_SECONDS) -> str:
    """Why the Hugging Face hub (``HF_ENDPOINT``) does not answer within ``timeout`` seconds, or "" when it
    does: one request, no retries (the hub libraries retry for minutes before they give up), in a thread
    waited for at most ``timeout`` (a name lookup is not bounded by the request's own timeout)."""
    from huggingface_hub import constants, get_session

    why = [f"no answer within {timeout:.0f} s"]

    def probe():
        try:
            get_session().head(constants.ENDPOINT, timeout=timeout)
            why[0] = ""
        except Exception as error:  # noqa: BLE001 - DNS, refused, timed out, proxy: all say "not reachable"
            why[0] = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"

    asking = threading.Thread(target=probe, name="ftcourse-hub-probe", daemon=True)
    asking.start()
    asking.join(timeout + 0.5)
    return why[0]


def _from_the_hub(profile) -> dict:
    """What ``reference(profile)`` would fetch from the hub, and the setting that spares it: SST-2 unless
    ``FTCOURSE_DATA`` holds it, the encoder unless it is a local folder."""
    from .. import config, models

    needs = {}
    if not config.data_dir():
        needs["SST-2 (FTCOURSE_DATA is not set)"] = ("set FTCOURSE_DATA to a folder holding sst2/ in its original "
                                                     "format (e.g. ../shared/datasets)")
    source = models.model_source("encoder", profile)
    if not models.is_local(source):
        needs[f"the encoder {source!r}"] = (f"set {models.ENV_OVERRIDES['encoder']} to a local copy of it, or grade "
                                            "under a profile whose models are installed (--profile grading)")
    return needs


def prepare(profile) -> Reference:
    """The ``Reference`` of ``profile``, built before any submission runs (``ftcourse grade`` calls it first),
    or ``ReferenceUnavailable`` within seconds: offline without ``FTCOURSE_DATA``, building it would otherwise
    sit in the hub client's retries for minutes, after the first submission had run for nothing. The hub is
    asked once, briefly, only when something must come from it and it is not offline (with ``HF_HUB_OFFLINE=1``
    the hub libraries read their cache and fail at once); the loaders' own errors name their fix."""
    from .. import config, data, models

    try:
        with _lock:
            if profile.name in _references and _references[profile.name].profile == profile:
                return _references[profile.name]
        needs = _from_the_hub(profile)
        why = hub_unreachable() if needs and not models._hub_offline() else ""
        if why:
            from huggingface_hub import constants

            raise ReferenceUnavailable(
                f"The grader needs {' and '.join(needs)} from the Hugging Face hub to build its reference model "
                f"(profile {profile.name!r}), and the hub at {constants.ENDPOINT} does not answer ({why}). Fix: "
                f"{'; '.join(needs.values())}; or go online (or, if the Hugging Face cache holds them, set "
                "HF_HUB_OFFLINE=1 to read them from there).")
        return reference(profile)
    except (data.DataError, models.ModelNotAvailableError, config.ConfigError) as error:
        raise ReferenceUnavailable(f"The grader cannot build its reference model (profile {profile.name!r}): "
                                   f"{error}") from None


def _reference_listing(model) -> dict:
    return {canonical(n): (tuple(p.shape), bool(p.requires_grad)) for n, p in model.named_parameters()}


def _same_model(found: dict, expected: dict, regime: str) -> None:
    """The recorded model has the reference's parameters, and trains exactly the ones it trains."""
    missing, extra = set(expected) - set(found), set(found) - set(expected)
    if missing or extra:
        raise EvidenceMissing(f"the {regime!r} model is not the course's (pretrained encoder + SentenceClassifier"
                              f"{' + LoRA' if regime == 'lora' else ''}): "
                              + "; ".join(part for part in (f"missing {_few(missing)}" if missing else "",
                                                            f"unexpected {_few(extra)}" if extra else "") if part))
    shapes = [n for n in expected if found[n][0] != expected[n][0]]
    if shapes:
        raise EvidenceMissing(f"the {regime!r} model's shapes differ from the course's: {_few(shapes)}")
    should, does = {n for n, (_, t) in expected.items() if t}, {n for n, (_, t) in found.items() if t}
    if should != does:
        wrong = does - should
        raise EvidenceMissing(f"the {regime!r} regime trains the wrong parameters: "
                              + (f"{len(wrong)} train that should be frozen ({_few(wrong)})" if wrong else
                                 f"{len(should - does)} are frozen that should train ({_few(should - does)})"))


def trainable_count(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------- the verdicts


def lora_on_bert_base(record) -> str:
    """Part 1: the LoRA count on bert-base, recomputed from the configuration ``add_lora`` used."""
    from .checks import bert_base_architecture, lora_parameter_count

    if not isinstance(record, dict):
        raise EvidenceMissing("nothing was recorded for add_lora")
    raised(record, "add_lora(encoder)")
    settings = lora_settings(record.get("config"))
    _course_lora(settings)
    model = with_lora(bert_base_architecture(), settings)
    lora = lora_parameter_count(model)
    total = sum(p.numel() for p in model.parameters())
    trainable = trainable_count(model)
    expected = _reference_listing(model)
    found = _listing(record.get("parameters"))
    if found != expected:
        differ = {n for n in set(found) | set(expected) if found.get(n) != expected.get(n)}
        raise EvidenceMissing(f"the model add_lora returned is not what its LoRA configuration gives "
                              f"({len(differ)} parameters differ, e.g. {_few(differ)})")
    percent = 100 * trainable / total
    if lora != BERT_BASE_LORA_PARAMETERS or trainable != lora or round(percent, 2) != BERT_BASE_LORA_PERCENT:
        raise EvidenceMissing(f"LoRA on bert-base: expected {BERT_BASE_LORA_PARAMETERS:,} LoRA parameters, all of "
                              f"the trainable ones ({BERT_BASE_LORA_PERCENT}%), found {lora:,} LoRA, {trainable:,} "
                              f"trainable ({percent:.3f}%)")
    return f"recomputed: {lora:,} LoRA parameters of {total:,} ({percent:.2f}%)"


def regime_model(record, regime: str, ref: Reference) -> str:
    """Part 2: ``build_model(regime)`` is the course's model for the regime, training what it should."""
    if not isinstance(record, dict):
        raise EvidenceMissing(f"nothing was recorded for build_model({regime!r})")
    raised(record, f"build_model({regime!r})")
    lora = None
    if regime == "lora":
        lora = lora_settings(record.get("lora"))
        _course_lora(lora)
    model = ref.model(regime, lora)
    _same_model(_listing(record.get("parameters")), _reference_listing(model), regime)
    return f"{regime}: {trainable_count(model):,} trainable"


def trained_model(record, regime: str, what: str, folder: Path, ref: Reference, check_fit: bool = False):
    """The model a run trained, rebuilt from the course's code with the run's changed weights loaded,
    after checking that it is the regime's model, that every parameter the regime trains changed and
    that every other one is the pretrained one. Returns (model, trainable count)."""
    if not isinstance(record, dict):
        raise EvidenceMissing(f"nothing was recorded for {what}")
    raised(record, what)
    if not record.get("models_built"):
        raise EvidenceMissing(f"{what} did not build its model with build_model, so the grader cannot see what "
                              "it trained")
    lora = None
    if regime == "lora":
        lora = lora_settings(record.get("lora"))
        _course_lora(lora)
    model = ref.model(regime, lora)
    expected = _reference_listing(model)
    _same_model(_listing(record.get("parameters")), expected, regime)
    trains = {n for n, (_, t) in expected.items() if t}
    changed = {canonical(n) for n in record.get("changed", []) if isinstance(n, str)}
    moved_frozen = changed - trains
    if moved_frozen:
        raise EvidenceMissing(f"{what}: {len(moved_frozen)} parameters the {regime!r} regime freezes moved during "
                              f"training ({_few(moved_frozen)})")
    still = trains - changed
    if still:
        raise EvidenceMissing(f"{what}: {len(still)} of the {len(trains)} parameters that train never changed "
                              f"({_few(still)}): was the model trained?")
    digests = {canonical(n): d for n, d in (record.get("digests") or {}).items()}
    raw = {canonical(n): d for n, d in (record.get("raw_digests") or {}).items()}
    if raw != digests:
        differ = {n for n in set(raw) | set(digests) if raw.get(n) != digests.get(n)}
        raise TwoViewsDisagree(f"{what}: the model's parameters read through named_parameters and read from its "
                               f"modules' own dictionaries disagree ({len(differ)}, e.g. {_few(differ)}): something "
                               "in the submission changed what one view shows")
    for name in expected:
        if name not in trains and (name not in ref.pretrained or digests.get(name) != ref.pretrained[name]):
            raise EvidenceMissing(f"{what}: the frozen parameter {name} is not the pretrained one")
    weights = {canonical(n): t for n, t in read_weights(folder, record.get("file")).items()}
    if set(weights) != changed:
        raise EvidenceMissing(f"{what}: the saved weights are not the parameters that changed")
    _load(model, weights, f"{what}: the saved")
    with _descent_lock:  # one at a time: each holds a second copy of the model and its gradient
        start = start_model(record, regime, what, folder, ref, lora)
        found = descent(start, model, ref)
        fits = fit(start, model, ref) if check_fit and found["z"] >= DESCENT_MIN_Z else None  # else descent decides
        del start
        from ..training import _return_freed_memory_to_os

        _return_freed_memory_to_os()  # that copy, back to the OS before the next check
    _check_descent(found, what)
    if check_fit:
        _check_fit(fits, what)
    model.descent, model.fit = found, fits  # for the verdict's message
    return model, trainable_count(model)


def start_model(record, regime: str, what: str, folder: Path, ref: Reference, lora):
    """The model a run started from, rebuilt: the course's pretrained encoder (every pretrained
    parameter's recorded start digest must be the grader's own) and the new parameters (the head,
    LoRA) as the run built them."""
    model = ref.model(regime, lora)
    start = {canonical(n): d for n, d in (record.get("start_digests") or {}).items()}
    if not start or not record.get("start_file"):
        raise EvidenceMissing(f"{what}: the model's weights as built were not recorded")
    params = {canonical(n): p for n, p in model.named_parameters()}
    for name in params:
        if not is_new_parameter(name) and start.get(name) != ref.pretrained.get(name):
            raise EvidenceMissing(f"{what}: the model did not start from the pretrained encoder ({name} differs)")
    values = {canonical(n): t for n, t in read_weights(folder, record["start_file"]).items()}
    if set(values) != {n for n in params if is_new_parameter(n)}:
        raise EvidenceMissing(f"{what}: the recorded start is not the model's new parameters")
    _load(model, values, f"{what}: the recorded start of")
    return model


def _load(model, weights: dict, said: str) -> None:
    """Copy ``weights`` (canonical name -> tensor, read from the evidence) into ``model``, refusing
    any of another shape or type (``said`` begins the message)."""
    params = {canonical(n): p for n, p in model.named_parameters()}
    with torch.no_grad():
        for name, tensor in weights.items():
            if tuple(tensor.shape) != tuple(params[name].shape) or tensor.dtype != params[name].dtype:
                raise EvidenceMissing(f"{said} {name} has the wrong shape or type")
            params[name].copy_(tensor)


def _loss(model, batch) -> torch.Tensor:
    model.eval()  # no dropout: the grader's loss is a function of the weights alone
    return model(**batch)["loss"]


def descent(start, final, ref: Reference) -> dict:
    """Whether ``final`` is ``start`` moved down the training loss, on the grader's own examples: the
    change of the trainable weights (those with a gradient at the start) against the loss's negative
    gradient there, as a cosine and as a sign agreement, each in standard deviations of a random
    change (``z``, the larger), and the loss before and after (shown, not judged: a large first step
    can overshoot). Training moves the weights against the gradient; noise does not."""
    trainable = [(n, p) for n, p in start.named_parameters() if p.requires_grad]
    before = _loss(start, ref.train_batch)
    gradients = torch.autograd.grad(before, [p for _, p in trainable])
    finals = dict(final.named_parameters())
    # A tensor with no gradient at the start (LoRA's A, while B is still zero) moves only once others
    # have: its change says nothing about this step's direction, so it stays out of the alignment.
    moving = [(n, p, g) for (n, p), g in zip(trainable, gradients) if g.abs().sum() > 0]
    with torch.no_grad():
        after = _loss(final, ref.train_batch).item()
        change = torch.cat([(finals[n] - p).reshape(-1) for n, p, _ in moving])
        downhill = -torch.cat([g.reshape(-1) for _, _, g in moving])
        norm = change.norm() * downhill.norm()
        alignment = (change @ downhill / norm).item() if norm > 0 else 0.0
        both = (change != 0) & (downhill != 0)  # coordinates that moved and have a direction to move in
        n = int(both.sum())
        agreement = ((change * downhill)[both] > 0).double().mean().item() if n else 0.5
    # How far each reading sits from a random change's, in standard deviations: a random direction's
    # cosine with a fixed one is about N(0, 1/d), and it agrees in sign on about half the coordinates,
    # N(1/2, 1/(4n)). Adam's steps agree in sign (LoRA's, many small ones); plain descent aligns.
    z = max(alignment * math.sqrt(max(change.numel(), 1)), (agreement - 0.5) * 2 * math.sqrt(max(n, 1)))
    found = {"loss_before": before.item(), "loss_after": after, "alignment": alignment, "agreement": agreement,
             "coordinates": n, "z": z}
    del gradients, moving, change, downhill, before  # the start model's graph and gradient: freed now
    return found


def slopes(start, final, ref: Reference, split) -> torch.Tensor:
    """How fast each example's loss falls along the run's change, at its start: the directional derivative
    ``-d loss_i / dt`` of ``start + t (final - start)`` at ``t = 0``, exactly, by forward-mode
    differentiation (``torch.func.jvp``) with the change as the tangent. Only the weights that moved carry
    one (a frozen run's encoder does not), and a derivative needs no difference of nearby losses, which
    float32 would round away for the change of a few small steps."""
    from torch.func import functional_call, jvp
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..training import in_dataset_order

    finals = dict(final.named_parameters())
    starts = {n: p.detach() for n, p in start.named_parameters()}
    changes = {n: finals[n].detach() - p for n, p in starts.items()}
    moved = [n for n, change in changes.items() if change.any()]
    start.eval()  # no dropout: a function of the weights alone

    def falls(batch):
        inputs = {k: v for k, v in batch.items() if k != "labels"}

        def losses(weights):  # the weights not passed stay the start's own
            logits = functional_call(start, weights, (), inputs, strict=False)["logits"]
            return torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none")

        return -jvp(losses, ({n: starts[n] for n in moved},), ({n: changes[n] for n in moved},))[1]

    # The fused attention kernels have no forward-mode derivative; the math kernel is plain differentiable ops.
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        return torch.stack(in_dataset_order(falls, split, 64, ref.tokenizer.pad_token_id or 0))


def fit(start, final, ref: Reference) -> dict:
    """Whether the change fits the grader's training examples better than sentences the run cannot have
    seen: each example's ``slopes`` on the training set against the held-out sentences, as a Mann-Whitney
    ``z`` (ranks, so a run that trained on 2 of the examples, and fits those 2 hard, does not shift it).
    A run learns something particular to each sentence it trains on, so an honest run's training
    sentences fall faster than unseen ones; a run trained on a few of them, or on other data, moves
    them as it moves unseen sentences: ``z`` near 0."""
    from scipy.stats import mannwhitneyu

    held = ref.held_out.select(range(min(FIT_HELD_OUT_PER_EXAMPLE * len(ref.train_set), FIT_HELD_OUT,
                                         len(ref.held_out))))
    train, unseen = slopes(start, final, ref, ref.train_set), slopes(start, final, ref, held)
    n1, n2 = len(train), len(unseen)
    u = mannwhitneyu(train.numpy(), unseen.numpy(), alternative="greater").statistic
    z = (u - n1 * n2 / 2) / math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    return {"z": float(z), "train": train.mean().item(), "unseen": unseen.mean().item(), "n_train": n1,
            "n_unseen": n2}


def _readings(found: dict) -> str:
    """The two readings behind a descent ``z``, for every message that quotes it."""
    return f"cosine with the negative gradient {found['alignment']:+.3f}, sign agreement {found['agreement']:.3f}"


def descent_text(model) -> str:
    found = model.descent
    return (f"descent on the grader's examples: {found['z']:.1f} standard deviations from a random change (least "
            f"{DESCENT_MIN_Z:g}; {_readings(found)}; loss {found['loss_before']:.4f} -> {found['loss_after']:.4f})")


def _check_descent(found: dict, what: str) -> None:
    if DESCENT_REVIEW_Z <= found["z"] < DESCENT_MIN_Z:
        raise DescentUnclear(
            f"{what}: the weights moved down the training loss on the grader's examples, but only "
            f"{found['z']:.1f} standard deviations from a random change: more than noise gives (under "
            f"{DESCENT_REVIEW_Z:g}), less than training on the exercise's data usually gives ({DESCENT_MIN_Z:g} or "
            f"more; a head trained in an unlucky order can land here, and so can a run trained on a few "
            f"sentences; {_readings(found)}). For the instructor to judge.")
    if not found["z"] >= DESCENT_MIN_Z:
        raise EvidenceMissing(
            f"{what}: the weights did not move down the training loss on the grader's examples: their change "
            f"sits {found['z']:.1f} standard deviations from a random one (training moves them at least "
            f"{DESCENT_MIN_Z:g} away: {_readings(found)}). Was it trained, and on the exercise's training set?")


def fit_text(model) -> str:
    found = model.fit
    return (f"fit to the grader's training examples: their losses fall {found['z']:.1f} standard deviations faster "
            f"along the change than {found['n_unseen']} unseen sentences' (least {FIT_MIN_Z:g})")


def _check_fit(found: dict, what: str) -> None:
    if not found["z"] >= FIT_MIN_Z:
        raise FitUnclear(
            f"{what}: the change is a step down the training loss, but the losses of the grader's "
            f"{found['n_train']} training examples fall along it only {found['z']:.1f} standard deviations "
            f"faster than those of {found['n_unseen']} sentences it cannot have seen (a run trained on these "
            f"examples fits them: {FIT_MIN_Z:g} or more). Trained on a few of them, or on other data? "
            "For the instructor to judge.")


def rescore(model, ref: Reference, split=None) -> float:
    """The model's accuracy on the grader's dev set (or ``split``), with the course's ``predict``."""
    from ..training import accuracy, predict

    logits, labels = predict(model, ref.dev_set if split is None else split, pad_token_id=ref.tokenizer.pad_token_id or 0)
    return accuracy(logits, labels)["accuracy"]


#: How far (in standard errors of the difference, beyond HELD_OUT_MARGIN) a run's dev accuracy may sit above
#: its accuracy on the grader's held-out sentences before the run goes to the instructor: the two are drawn
#: from one dev set, so an honest run's gap is sampling noise; a run that trained on the dev set scores it
#: far above sentences it never saw.
HELD_OUT_MIN_Z = 4.0
HELD_OUT_MARGIN = 0.02
#: The same question read from the per-example losses (``held_out_loss_gap``, Welch's t). Measured on 18 honest
#: runs (3 regimes x 3 seeds, smoke and grading profiles) the largest was +1.9; runs that trained on the notebook's
#: dev set for 1 epoch read +1.1 to +5.5, for 3 epochs +3.7 to +11.7 (their accuracy gap, 0.9 to 4.9).
HELD_OUT_LOSS_MIN_T = 3.5


def held_out_gap(dev: float, held: float, n_dev: int, n_held: int) -> float:
    """``dev - held`` in standard errors of a difference of two accuracies (pooled), after ``HELD_OUT_MARGIN``."""
    pooled = (dev * n_dev + held * n_held) / (n_dev + n_held)
    se = math.sqrt(max(pooled * (1 - pooled), 1e-4) * (1 / n_dev + 1 / n_held))
    return (dev - held - HELD_OUT_MARGIN) / se


def example_losses(model, ref: Reference, split) -> torch.Tensor:
    """The cross-entropy of each example of ``split`` under ``model`` (the course's ``predict``)."""
    from ..training import predict

    logits, labels = predict(model, split, pad_token_id=ref.tokenizer.pad_token_id or 0)
    return torch.nn.functional.cross_entropy(torch.stack(logits).float(), torch.stack(labels), reduction="none")


def held_out_loss_gap(dev_losses, held_losses) -> float:
    """How much lower the mean loss on the dev set is than on the held-out sentences, in standard errors
    (Welch): a continuous reading of the same question as ``held_out_gap``, with far more power on a small
    dev set (32 sentences at smoke), because a run that trained on a sentence lowers its loss before it flips
    its answer."""
    dev_losses, held_losses = torch.as_tensor(dev_losses).double(), torch.as_tensor(held_losses).double()
    se = math.sqrt(dev_losses.var().item() / len(dev_losses) + held_losses.var().item() / len(held_losses))
    return (held_losses.mean() - dev_losses.mean()).item() / max(se, 1e-12)


def _check_held_out(model, rescored: float, held: float, ref: Reference, what: str) -> None:
    z = held_out_gap(rescored, held, len(ref.dev_set), len(ref.held_out))
    t = held_out_loss_gap(example_losses(model, ref, ref.dev_set), example_losses(model, ref, ref.held_out))
    if z > HELD_OUT_MIN_Z or t > HELD_OUT_LOSS_MIN_T:
        raise HeldOutGap(
            f"{what} scores {rescored:.4f} on the dev set the notebook holds but {held:.4f} on {len(ref.held_out):,} "
            f"held-out dev sentences the sandbox never had, {z:.1f} standard errors apart beyond "
            f"{HELD_OUT_MARGIN:g} (an honest run's gap is sampling noise, under {HELD_OUT_MIN_Z:g}), and its mean loss "
            f"is {t:.1f} standard errors lower on the dev set (honest: under {HELD_OUT_LOSS_MIN_T:g}): trained on "
            "the dev set? For the instructor to judge.")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value, what: str, key: str, low: float = 0.0) -> None:
    if not (_number(value) and math.isfinite(value) and value > low):
        raise EvidenceMissing(f"{what} reports {key} = {value!r}: expected a positive number")


def run(record, regime: str, seed: int, folder: Path, ref: Reference) -> dict:
    """Part 4 (and the seed study): one ``run_regime`` run, verified and re-scored. Returns the grader's figures."""
    what = f"run_regime({regime!r}, {seed})"
    if isinstance(record, dict):
        raised(record, what)
    result = record.get("result") if isinstance(record, dict) else None
    missing = [key for key in RESULT_KEYS if not isinstance(result, dict) or key not in result]
    if isinstance(record, dict) and missing:
        raise EvidenceMissing(f"{what} returned no {', '.join(repr(k) for k in missing)}")
    if isinstance(record, dict) and result["regime"] != regime:
        raise EvidenceMissing(f"{what} says its regime is {result['regime']!r}")
    model, count = trained_model(record, regime, what, folder, ref)
    rescored = rescore(model, ref)
    reported = result["accuracy"]
    if not _number(reported) or not math.isfinite(reported) or \
            abs(reported - rescored) > 1 / len(ref.dev_set) + 1e-9:
        raise EvidenceMissing(f"{what} reports accuracy {reported!r}, but the model it trained scores {rescored:.4f} "
                              "on the dev set (scored on another split, or not this model?)")
    if result["trainable"] != count:
        raise EvidenceMissing(f"{what} reports {result['trainable']!r} trainable parameters; the {regime!r} model "
                              f"has {count:,}")
    _positive(result["seconds_per_epoch"], what, "seconds_per_epoch")
    _positive(result["peak_mib"], what, "peak_mib", -1e-9)
    held = rescore(model, ref, ref.held_out) if ref.held_out is not None and len(ref.held_out) else None
    if held is not None:
        _check_held_out(model, rescored, held, ref, what)
    return {"regime": regime, "seed": seed, "accuracy": rescored, "held_out": held, "trainable": count,
            "descent": descent_text(model)}


def loop(record, regime: str, folder: Path, ref: Reference) -> str:
    """Part 3: the student's ``train_loop`` trained what the regime trains, and nothing else."""
    what = f"train_loop(build_model({regime!r}), ...)"
    model, count = trained_model(record, regime, what, folder, ref, check_fit=True)
    _positive((record.get("result") or {}).get("seconds_per_epoch"), what, "seconds per epoch")
    return (f"{regime}: {count:,} parameters trained, re-scored {rescore(model, ref):.4f}; {descent_text(model)}; "
            f"{fit_text(model)}")


def summary(records, examples) -> str:
    """Part 5: ``summarize`` gives the mean, the sample standard deviation and the range."""
    if not isinstance(records, list) or len(records) != len(examples):
        raise EvidenceMissing("summarize was not run on the grader's examples")
    for record, values in zip(records, examples):
        if not isinstance(record, dict) or record.get("values") != list(values):
            raise EvidenceMissing("summarize's record does not match the grader's examples")
        raised(record, f"summarize({values})")
        found = record.get("summary") or {}
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        for key, value in {"mean": mean, "std": std, "range": max(values) - min(values)}.items():
            got = found.get(key)
            if not (_number(got) and math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-9)):
                raise EvidenceMissing(f"summarize({values})[{key!r}]: expected {value:.6f}, found {got!r}"
                                      + (" (std is the sample standard deviation: divide by n - 1)"
                                         if key == "std" else ""))
    return f"summarize: right on {len(examples)} examples"
