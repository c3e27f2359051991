"""LoRA with ``peft``: add it with readable errors, save it, serve many tasks from one backbone.

LoRA (Hu et al., 2021) freezes a pretrained weight ``W`` (``d_out × d_in``) and learns a
low-rank update: ``h = W x + (α / r) · B A x`` with ``A`` (``r × d_in``) and ``B``
(``d_out × r``), ``B`` starting at zero so training starts from the pretrained model.
Only ``A`` and ``B`` train and only they are stored per task, beside the task's head.

The course wraps the *encoder* with ``peft`` and keeps its own head (``ftcourse.heads``)
beside it, so any head shape works. A saved task adapter is one folder:

- ``adapter_model.safetensors`` and ``adapter_config.json``: the LoRA matrices, written by
  ``peft``'s ``save_pretrained``;
- ``head.safetensors``: the task head's weights;
- ``ftcourse_adapter.json``: the task, the head's class and size, and a fingerprint of the
  backbone the adapter was trained on (a LoRA update means nothing on another backbone).

``AdapterServer`` holds one backbone and any number of such adapters, switched by name
with ``peft``'s ``set_adapter``.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from . import heads as heads_module
from . import models
from .report import Table

DEFAULT_TARGETS = ("query", "value")
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
HEAD_WEIGHTS = "head.safetensors"
SIDECAR = "ftcourse_adapter.json"
HEAD_CLASSES = ("SentenceClassifier", "TokenTagger")


class LoraSetupError(ValueError):
    """LoRA could not be added or loaded as asked; the message says why and the fix."""


class TargetModulesNotFoundError(LoraSetupError):
    pass


class InvalidRankError(LoraSetupError):
    pass


class AdapterBackboneMismatchError(LoraSetupError):
    pass


# ----------------------------------------------------------------------------- targets


def _is_lora_internal(name: str) -> bool:
    return any(part.startswith("lora_") or part in ("base_layer", "modules_to_save", "original_module")
               for part in name.split("."))


def linear_module_names(model: nn.Module) -> list[str]:
    """The short names of the model's ``nn.Linear`` layers (what ``target_modules`` takes),
    e.g. ``['dense', 'key', 'query', 'value']`` for a BERT encoder."""
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and name and not _is_lora_internal(name)}
    return sorted(names)


def matching_linear_layers(model: nn.Module, targets: Sequence[str]) -> dict:
    """Full name -> ``nn.Linear`` for every layer a target names, by ``peft``'s rule: a
    target matches a module whose full name equals it or ends with ``.target``."""
    targets = [targets] if isinstance(targets, str) else list(targets)
    return {name: module for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and not _is_lora_internal(name)
            and any(name == t or name.endswith("." + t) for t in targets)}


def _check_targets(model: nn.Module, targets: Sequence[str]) -> None:
    if isinstance(targets, str):
        targets = [targets]
    if not targets:
        raise TargetModulesNotFoundError(
            f"No target modules given. Fix: name some of the model's linear layers: "
            f"{', '.join(linear_module_names(model))}.")
    missing = [t for t in targets if not matching_linear_layers(model, [t])]
    if missing:
        raise TargetModulesNotFoundError(
            f"LoRA target module(s) {missing} match no linear layer of this "
            f"{type(model).__name__}. Its linear layers are named: "
            f"{', '.join(linear_module_names(model))}. Fix: pick targets from that list "
            "(for BERT, attention is 'query', 'key', 'value'; 'dense' is every other projection).")


def _check_rank(rank) -> None:
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise InvalidRankError(
            f"LoRA rank must be a positive integer, got {rank!r}. Fix: use e.g. rank=8 "
            "(the update B·A has rank at most r; r=0 would train nothing).")


# ----------------------------------------------------------------------------- adding


def lora_config(rank: int = 8, targets: Sequence[str] = DEFAULT_TARGETS, alpha: int | None = None,
                dropout: float = 0.1, task_type=None, modules_to_save=None):
    """A ``peft.LoraConfig``. ``alpha`` defaults to ``rank`` (scale α/r = 1, as Hu et al.
    use for RoBERTa-base on GLUE)."""
    from peft import LoraConfig

    _check_rank(rank)
    return LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else rank, lora_dropout=dropout,
                      target_modules=list([targets] if isinstance(targets, str) else targets),
                      task_type=task_type, modules_to_save=modules_to_save)


def lora_layer_output(linear: nn.Linear, A: torch.Tensor, B: torch.Tensor, alpha: float,
                      x: torch.Tensor) -> torch.Tensor:
    """What ``peft``'s own LoRA layer computes on ``x`` around a copy of the frozen ``linear``,
    given ``A`` (r×d_in) and ``B`` (d_out×r): lesson 3 checks its inline ``W x + (α/r)·B·A x``
    against it."""
    from peft import inject_adapter_in_model

    holder = nn.Module()
    holder.projection = copy.deepcopy(linear)
    settings = lora_config(A.shape[0], ["projection"], alpha=alpha, dropout=0.0)
    layer = inject_adapter_in_model(settings, holder).projection
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(A)
        layer.lora_B["default"].weight.copy_(B)
        return layer(x)


def add_lora(model: nn.Module, rank: int = 8, targets: Sequence[str] = DEFAULT_TARGETS,
             alpha: int | None = None, dropout: float = 0.1, task_type=None, modules_to_save=None,
             adapter_name: str = "default"):
    """Wrap ``model`` with LoRA via ``peft.get_peft_model``: its weights freeze, and
    rank-``rank`` updates are added to the linear layers named by ``targets``. Raises
    ``TargetModulesNotFoundError`` (listing the model's linear layers) or
    ``InvalidRankError`` instead of peft's terser errors."""
    from peft import get_peft_model

    _check_rank(rank)
    _check_targets(model, targets)
    config = lora_config(rank, targets, alpha, dropout, task_type, modules_to_save)
    return get_peft_model(model, config, adapter_name=adapter_name)


def lora_task_model(encoder: nn.Module, head: heads_module.Head, rank: int = 8,
                    targets: Sequence[str] = DEFAULT_TARGETS, alpha: int | None = None,
                    dropout: float = 0.1) -> heads_module.TaskModel:
    """``head(LoRA(encoder))``: the encoder frozen with LoRA on ``targets``, the head trainable.
    Train it with ``ftcourse.training.train`` like any ``TaskModel``."""
    fingerprint = models.fingerprint(encoder)
    model = heads_module.TaskModel(add_lora(encoder, rank, targets, alpha, dropout), head)
    model.backbone_fingerprint = fingerprint  # kept for save_task_adapter
    return model


# ----------------------------------------------------------------------------- backbone identity


def _backbone_name(encoder: nn.Module) -> str:
    config = getattr(encoder, "config", None)
    name = getattr(config, "_name_or_path", "") or type(encoder).__name__
    return Path(name).name if Path(name).exists() else name


# ----------------------------------------------------------------------------- saving and loading


def save_task_adapter(model: heads_module.TaskModel, folder, task: str) -> dict:
    """Save a LoRA task model's own weights to ``folder``: the LoRA matrices with
    ``peft``'s ``save_pretrained`` (safetensors), the head, and the sidecar that names the
    backbone. Returns file name -> size in bytes."""
    from safetensors.torch import save_file

    encoder, head = model.encoder, model.head
    if not hasattr(encoder, "peft_config"):
        raise LoraSetupError("This model's encoder has no LoRA: build it with lora_task_model().")
    if type(head).__name__ not in HEAD_CLASSES:
        raise LoraSetupError(f"Saving supports heads {HEAD_CLASSES}, not {type(head).__name__}.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    active = encoder.active_adapter
    # save_embedding_layers=False: the course never resizes the vocabulary, and peft's "auto"
    # asks the hub for the base model's config (offline, with a hub id: a warning that
    # prints a machine path).
    encoder.save_pretrained(folder, selected_adapters=[active], safe_serialization=True, save_embedding_layers=False)
    if active != "default":  # peft puts non-default adapters in a subfolder: flatten it
        for file in (folder / active).iterdir():
            file.replace(folder / file.name)
        (folder / active).rmdir()
    (folder / "README.md").unlink(missing_ok=True)  # peft's empty model-card template
    save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, folder / HEAD_WEIGHTS)
    linear = head.classifier
    sidecar = {
        "task": task,
        "head": type(head).__name__,
        "hidden_size": linear.in_features,
        "num_labels": linear.out_features,
        "backbone": _backbone_name(encoder),
        "backbone_fingerprint": getattr(model, "backbone_fingerprint", None) or models.fingerprint(encoder),
    }
    (folder / SIDECAR).write_text(json.dumps(sidecar, indent=2))
    return adapter_files(folder)


def adapter_files_table(model: heads_module.TaskModel, files: dict, title: str = "") -> Table:
    """A saved adapter's files beside what its trainable parameters weigh in fp32 (``files`` as
    ``save_task_adapter`` returns them). The weights on disk exceed the count by safetensors'
    headers only. (``costs.regime_storage_table`` compares the regimes' storage instead.)"""
    computed = 4 * heads_module.count_parameters(model)["trainable"]
    weights = files.get("adapter_model.safetensors", 0) + files.get(HEAD_WEIGHTS, 0)
    rows = [[name, size] for name, size in files.items()]
    return Table(["file", "bytes"], rows, title, notes=[
        f"trainable parameters x 4 bytes: {computed:,}; weights on disk: {weights:,} "
        f"(+{weights - computed:,} bytes of safetensors headers)"])


def adapter_files(folder) -> dict:
    """File name -> size in bytes, for the files of a saved adapter folder."""
    return {f.name: f.stat().st_size for f in sorted(Path(folder).iterdir()) if f.is_file()}


def read_sidecar(folder) -> dict:
    path = Path(folder) / SIDECAR
    if not (Path(folder) / ADAPTER_CONFIG).is_file():
        raise LoraSetupError(
            f"No {ADAPTER_CONFIG} in {Path(folder).name!r}: this is not a saved adapter folder. "
            "Fix: pass a folder written by save_task_adapter().")
    return json.loads(path.read_text()) if path.is_file() else {}


def check_adapter_matches(encoder: nn.Module, folder, fingerprint: str | None = None) -> dict:
    """Raise ``AdapterBackboneMismatchError`` unless the adapter in ``folder`` was trained on
    this ``encoder``: same fingerprint (when saved by the course) and LoRA shapes that fit
    the encoder's layers (always). Returns the sidecar."""
    from safetensors import safe_open

    folder = Path(folder)
    sidecar = read_sidecar(folder)
    saved = sidecar.get("backbone_fingerprint")
    ours = fingerprint or models.fingerprint(encoder)
    if saved and saved != ours:
        raise AdapterBackboneMismatchError(
            f"The adapter {folder.name!r} (task {sidecar.get('task')!r}) was trained on the backbone "
            f"{sidecar.get('backbone')!r} (fingerprint {saved}), but this backbone is "
            f"{_backbone_name(encoder)!r} (fingerprint {ours}). A LoRA update only makes sense on "
            "the weights it was trained with. Fix: load the adapter onto its own backbone, or retrain it.")
    layers = {name.removeprefix("base_model.model."): module for name, module in encoder.named_modules()
              if isinstance(module, nn.Linear)}
    with safe_open(folder / ADAPTER_WEIGHTS, framework="pt") as tensors:
        for key in tensors.keys():
            if ".lora_A" not in key and ".lora_B" not in key:
                continue
            layer_name = key.removeprefix("base_model.model.").split(".lora_")[0]
            shape = tuple(tensors.get_slice(key).get_shape())
            layer = layers.get(layer_name) or layers.get(layer_name + ".base_layer")
            expected_in = layer.in_features if layer is not None else None
            fits = layer is not None and (shape[1] == layer.in_features if ".lora_A" in key
                                          else shape[0] == layer.out_features)
            if not fits:
                raise AdapterBackboneMismatchError(
                    f"The adapter {folder.name!r} holds {key} of shape {shape}, which does not fit this "
                    f"backbone ({_backbone_name(encoder)!r}: "
                    f"{'no layer ' + layer_name if layer is None else f'{layer_name} takes {expected_in} inputs'}). "
                    "It was trained on another backbone. Fix: load it onto the backbone it was trained on.")
    return sidecar


def _load_head(folder: Path, sidecar: dict) -> heads_module.Head:
    from safetensors.torch import load_file

    head_class = getattr(heads_module, sidecar["head"])
    head = head_class(sidecar["hidden_size"], sidecar["num_labels"])
    head.load_state_dict(load_file(folder / HEAD_WEIGHTS))
    return head


def load_task_adapter(encoder: nn.Module, folder) -> heads_module.TaskModel:
    """A task model from a bare ``encoder`` and a saved adapter folder: the adapter's own
    model, for checking what ``AdapterServer`` serves."""
    from peft import PeftModel

    folder = Path(folder)
    sidecar = check_adapter_matches(encoder, folder)
    peft_encoder = PeftModel.from_pretrained(encoder, folder)
    return heads_module.TaskModel(peft_encoder, _load_head(folder, sidecar)).eval()


class AdapterServer(nn.Module):
    """One backbone in memory, many tasks: each task is a named LoRA adapter (switched with
    ``peft``'s ``set_adapter``) plus its own small head.

    >>> server = AdapterServer(encoder)
    >>> server.load("sst2", "adapters/sst2"); server.load("conll", "adapters/conll")
    >>> server.use("sst2"); server(**batch)["logits"]
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict()
        self.active: str | None = None
        self._fingerprint = models.fingerprint(encoder)

    @property
    def tasks(self) -> list[str]:
        return list(self.heads)

    def load(self, name: str, folder) -> "AdapterServer":
        """Attach the adapter saved in ``folder`` under ``name`` (and make it active)."""
        from peft import PeftModel

        folder = Path(folder)
        if name in self.heads:
            raise LoraSetupError(f"A task named {name!r} is already loaded. Loaded: {', '.join(self.tasks)}.")
        sidecar = check_adapter_matches(self.encoder, folder, self._fingerprint)
        if isinstance(self.encoder, PeftModel):
            self.encoder.load_adapter(folder, adapter_name=name)
        else:
            self.encoder = PeftModel.from_pretrained(self.encoder, folder, adapter_name=name)
        self.heads[name] = _load_head(folder, sidecar)
        self.use(name)
        return self.eval()

    def use(self, name: str) -> "AdapterServer":
        """Make ``name`` the active task: its LoRA update and its head answer from now on."""
        if name not in self.heads:
            raise LoraSetupError(f"No task named {name!r}. Loaded tasks: {', '.join(self.tasks) or 'none'}.")
        self.encoder.set_adapter(name)
        self.active = name
        return self

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **_):
        if self.active is None:
            raise LoraSetupError("No adapter loaded: call load(name, folder) first.")
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        return {"logits": self.heads[self.active](states, attention_mask)}


# ----------------------------------------------------------------------------- merged vs unmerged


def merged_copy(model: heads_module.TaskModel) -> heads_module.TaskModel:
    """A copy whose encoder has the LoRA update folded into its weights
    (``W + (α/r)·B·A``, ``merge_and_unload``): a plain model again, with no extra cost at
    inference, but no longer switchable between tasks."""
    merged = copy.deepcopy(model)
    merged.encoder = merged.encoder.merge_and_unload()
    return merged.eval()


@torch.inference_mode()
def compare_merged(model: heads_module.TaskModel, batch: dict, repeats: int = 5) -> dict:
    """Outputs and speed of the unmerged (LoRA applied on the fly) and merged model on one
    batch: the largest absolute difference of the logits and the median seconds per pass."""
    merged = merged_copy(model)
    model.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    results = {}
    for label, candidate in (("unmerged", model), ("merged", merged)):
        candidate(**inputs)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            logits = candidate(**inputs)["logits"]
            times.append(time.perf_counter() - start)
        results[label] = {"logits": logits, "seconds": sorted(times)[len(times) // 2]}
    return {
        "max_abs_difference": (results["unmerged"]["logits"] - results["merged"]["logits"]).abs().max().item(),
        "unmerged_seconds": results["unmerged"]["seconds"],
        "merged_seconds": results["merged"]["seconds"],
    }
