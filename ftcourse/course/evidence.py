"""Inside the grading sandbox: call a submission's functions and write down what they produced, as data.

The grader's evidence kernel runs the course's given cells, the submission's definitions, and
then the cells ``ftcourse.course.grading`` writes, which call these functions. Each one calls
the student's code and records what came out into the evidence folder (``FTCOURSE_EVIDENCE_DIR``,
a folder the grader binds into the sandbox and caps in size):

- ``record_lora``: the peft configuration ``add_lora`` applied to bert-base's architecture, and
  the parameters it left trainable;
- ``record_regimes``: for each regime, the parameters of ``build_model(regime)`` (name, shape,
  whether it trains) and the LoRA configuration, if any;
- ``record_loop``: the student's ``train_loop`` run on ``build_model(regime)`` for the frozen and
  full regimes, on the training set as the given cell builds it (``grader_train_set``): the weights
  it changed, and the model's new parameters as built (the head's, LoRA's: where the grader's
  descent check starts);
- ``record_runs``: for each (regime, seed), what ``run_regime`` returned, and the model it trained
  (the one ``build_model`` returned during the call): a digest of every parameter before and after,
  the values of every parameter that changed during the call, and the new ones as built, as safetensors;
- ``record_summary``: what ``summarize`` returns on the grader's examples.

Nothing here decides a grade. This code runs in the same process as the submission, which can
change anything in it, so everything it writes is untrusted data: the grader's own process
(``ftcourse.course.verdicts``) rebuilds the models from the course's code, loads the recorded
weights into them, and recomputes every figure it judges.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import torch

ENV = "FTCOURSE_EVIDENCE_DIR"
#: peft LoraConfig fields the grader reads back (everything else of the config is ignored).
LORA_FIELDS = ("r", "lora_alpha", "lora_dropout", "target_modules", "bias", "use_rslora", "use_dora",
               "fan_in_fan_out", "modules_to_save", "layers_to_transform")


def folder() -> Path:
    path = Path(os.environ.get(ENV, "evidence"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_json(name: str, value) -> None:
    (folder() / name).write_text(json.dumps(value, default=_json_default), encoding="utf-8")


def _json_default(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return repr(value)[:200]


def parameters(model) -> list:
    """[name, shape, trains] for every parameter of ``model``."""
    return [[name, list(p.shape), bool(p.requires_grad)] for name, p in model.named_parameters()]


def lora_config(model) -> dict | None:
    """The peft LoRA configuration of a peft model (``model.peft_config``), or None."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    config = next(iter(configs.values()))
    found = {}
    for name in LORA_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, (set, frozenset, tuple)):
            value = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        found[name] = value
    return found


def _encoder_lora_config(model) -> dict | None:
    encoder = getattr(model, "encoder", None)
    return lora_config(encoder) if encoder is not None else None


def _error(error: BaseException) -> dict:
    """What a student function raised: its exception's name and message (shown, escaped, by the grader)."""
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        message = "(its message could not be read)"
    return {"error": {"ename": type(error).__name__[:100], "evalue": message[:500]}}


def record_call(name: str, function, *args) -> None:
    """``<name>.json``: what ``function(*args)`` returned (as JSON data), or what it raised."""
    try:
        record = {"value": _clean_result({"value": function(*args)})["value"]}
    except Exception as error:
        record = _error(error)
    _write_json(f"{name}.json", record)


def record_lora(add_lora) -> None:
    """``lora.json``: ``add_lora`` applied to bert-base-uncased's architecture (on the meta device)."""
    from .checks import bert_base_architecture

    try:
        model = add_lora(bert_base_architecture())
        record = {"config": lora_config(model), "parameters": parameters(model)}
    except Exception as error:  # the grader reports it for this part
        record = _error(error)
    _write_json("lora.json", record)


def record_regimes(build_model, regimes) -> None:
    """``regimes.json``: the parameters of ``build_model(regime)`` for each regime."""
    record = {}
    for regime in regimes:
        try:
            model = build_model(regime)
            record[regime] = {"parameters": parameters(model), "lora": _encoder_lora_config(model)}
        except Exception as error:
            record[regime] = _error(error)
    _write_json("regimes.json", record)


def _digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().to("cpu").contiguous().reshape(-1)
    return hashlib.sha256(str(tensor.dtype).encode() + (data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")).hexdigest()


def digests(model) -> dict:
    """name -> sha256 of the parameter's bytes."""
    return {name: _digest(p) for name, p in model.named_parameters()}


_get = object.__getattribute__  # the instance's own attributes, past any __getattr__ a class defines


def raw_digests(model) -> dict:
    """name -> sha256 of the parameter's bytes, found without the model's help: the module tree is
    walked through each module's own ``_modules`` and ``_parameters`` dictionaries, never through
    ``named_parameters``, ``parameters`` or ``__getattr__``, which a submission can patch to show a
    frozen copy. The grader compares this view with ``digests``: two views of one model that
    disagree send the part to review."""
    found, seen, pending = {}, set(), [("", model)]
    while pending:
        prefix, module = pending.pop()
        for name, parameter in _get(module, "_parameters").items():
            if parameter is not None and id(parameter) not in seen:
                seen.add(id(parameter))
                found[prefix + name] = _digest(parameter)
        pending.extend((f"{prefix}{name}.", child) for name, child in _get(module, "_modules").items()
                       if child is not None)
    return found


def _clean_result(row):
    """What ``run_regime`` returned, as JSON data (numbers as floats; anything else as text)."""
    if not isinstance(row, dict):
        return {"__type__": type(row).__name__}
    cleaned = {}
    for key, value in list(row.items())[:50]:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or value is None or isinstance(value, str):
            cleaned[str(key)] = value if not isinstance(value, str) else value[:100]
        elif type(value) is int:
            cleaned[str(key)] = value
        elif isinstance(value, (int, float)) or hasattr(value, "__float__"):
            try:
                number = float(value)
                cleaned[str(key)] = number if math.isfinite(number) else str(number)
            except Exception:  # noqa: BLE001
                cleaned[str(key)] = repr(value)[:100]
        else:
            cleaned[str(key)] = repr(value)[:100]
    return cleaned


def is_new_parameter(name: str) -> bool:
    """A parameter the course's pretrained encoder does not hold: the head's, LoRA's."""
    return not name.startswith("encoder.") or "lora_" in name


def _start(model) -> tuple[dict, dict]:
    """``(digests, values)`` of ``model`` as built: every parameter's digest, and the values of the
    new ones (the head, LoRA), which the grader's descent check starts from. The rest must be the
    pretrained encoder's, which the grader holds itself and checks against the digests."""
    values = {n: p.detach().to("cpu").contiguous().clone() for n, p in model.named_parameters() if is_new_parameter(n)}
    return digests(model), values


def _save_start(start: tuple, record: dict) -> None:
    from safetensors.torch import save_file

    before, values = start
    record["start_file"] = record["file"].replace(".safetensors", "-start.safetensors")
    save_file(values, str(folder() / record["start_file"]))
    record["start_digests"] = before


def _save_changes(model, before: dict, record: dict) -> None:
    """Save the parameters of ``model`` whose digest differs from ``before`` into ``record["file"]``,
    and note what the grader needs to rebuild the model."""
    from safetensors.torch import save_file

    after = digests(model)
    changed = {n: p.detach().to("cpu").contiguous().clone() for n, p in model.named_parameters()
               if after[n] != before.get(n)}
    save_file(changed, str(folder() / record["file"]))
    record.update(digests=after, raw_digests=raw_digests(model), changed=sorted(changed),
                  parameters=parameters(model), lora=_encoder_lora_config(model))


def record_run(namespace: dict, regime: str, seed: int, name: str) -> dict:
    """Call the submission's ``run_regime(regime, seed)`` with ``build_model`` watched: the model
    it returns is the one trained. Saves ``<name>.safetensors`` (the parameters that changed during
    the call) and returns the run's record."""
    built = []
    build_model = namespace.get("build_model")

    def watched(*args, **kwargs):
        model = build_model(*args, **kwargs)
        built.append((model, _start(model)))
        return model

    record = {"regime": regime, "seed": seed, "file": f"{name}.safetensors"}
    namespace["build_model"] = watched
    try:
        record["result"] = _clean_result(namespace["run_regime"](regime, seed))
    except Exception as error:
        record.update(_error(error))
        return record
    finally:
        namespace["build_model"] = build_model
    record["models_built"] = len(built)
    if built:
        model, start = built[-1]
        _save_start(start, record)
        _save_changes(model, start[0], record)
    return record


def grader_train_set():
    """The exercise's training set as its given cell builds it, loaded afresh from the sandbox's data
    under the session's profile: ``record_loop`` trains on this, not on whatever the submission's
    ``train_set`` names by then (a rebound or shrunken set would make a loop look like another)."""
    from .. import config, data, models

    profile, _ = config.profile_from_environment()
    sizes = profile.with_(train_sizes={"sst2": profile.exercise_train_size},
                          eval_sizes={"sst2": profile.exercise_eval_size})
    tokenizer = models.load_tokenizer(profile=profile)
    train = data.load_sst2(sizes)["train"]
    train = train.map(lambda batch: tokenizer(batch["sentence"], truncation=True, max_length=profile.max_length),
                      batched=True, remove_columns=["sentence"])
    return train.rename_column("label", "labels")


def record_loop(namespace: dict, regimes, file: str = "loop.json") -> None:
    """``loop.json``: for each regime, ``train_loop(build_model(regime), train_set, lr, epochs)`` with
    the grader's own copy of the training set (``grader_train_set``), the notebook's learning rate
    and the profile's epochs, and the weights it changed."""
    runs = []
    try:
        train_set = grader_train_set()
    except Exception as error:
        _write_json(file, [{"regime": regime, "seed": 0, **_error(error)} for regime in regimes])
        return
    for regime in regimes:
        record = {"regime": regime, "seed": 0, "file": f"loop-{regime}.safetensors", "models_built": 1}
        try:
            model = namespace["build_model"](regime, 0)
            start = _start(model)
            seconds = namespace["train_loop"](model, train_set, namespace["LEARNING_RATES"][regime],
                                              namespace["profile"].exercise_epochs, 0)
            record["result"] = _clean_result({"regime": regime, "seconds_per_epoch": seconds})
        except Exception as error:
            record.update(_error(error))
            runs.append(record)
            continue
        _save_start(start, record)
        _save_changes(model, start[0], record)
        runs.append(record)
    _write_json(file, runs)


def record_runs(namespace: dict, regimes, seeds, file: str) -> None:
    """``<file>.json``: a ``record_run`` for every regime and seed."""
    runs = [record_run(namespace, regime, seed, f"{Path(file).stem}-{regime}-{seed}")
            for regime in regimes for seed in seeds]
    _write_json(file, runs)


def record_summary(summarize, examples) -> None:
    """``summary.json``: ``summarize(values)`` for each of the grader's example lists."""
    found = []
    for values in examples:
        try:
            found.append({"values": list(values), "summary": _clean_result(summarize(list(values)))})
        except Exception as error:
            found.append({"values": list(values), **_error(error)})
    _write_json("summary.json", found)
