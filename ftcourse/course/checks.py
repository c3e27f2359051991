"""Checks a student can run in the exercise notebooks, with messages that teach.

Each check raises ``CheckFailed`` (an ``AssertionError``) saying what was expected, what
was found and, where it helps, what to look at; on success it prints one line and returns
what it measured. The grader (``ftcourse.course.grading``) calls the same functions, and some
more that the student notebook does not show.

>>> checks.check_frozen_regime(build_model("frozen"))
frozen regime: OK (trainable 770 = the head's parameters; no gradient reached the encoder)
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from ..heads import count_parameters
from .. import derived
from ..regimes import REGIMES

LORA_RANK = derived.LORA_RANK
LORA_TARGETS = tuple(derived.LORA_TARGETS)
#: bert-base-uncased, LoRA r=8 on query and value: 12 layers x 2 matrices x (768x8 + 8x768).
BERT_BASE_LORA_PARAMETERS = derived.lora_parameters(LORA_RANK, LORA_TARGETS)  # from the formula
BERT_BASE_LORA_PERCENT = round(derived.share_percent(BERT_BASE_LORA_PARAMETERS, derived.bert_base_parameters()), 2)
RESULT_KEYS = ("regime", "accuracy", "seconds_per_epoch", "trainable", "peak_mib")


class CheckFailed(AssertionError):
    """A check did not hold; the message says what was expected and what was found."""


def expect(condition: bool, what: str, expected, found, hint: str = "") -> None:
    """Raise ``CheckFailed`` unless ``condition``: "<what>: expected <expected>, found <found>"."""
    if not condition:
        message = f"{what}: expected {expected}, found {found}."
        raise CheckFailed(message + (f" {hint}" if hint else ""))


def _fmt(n: int) -> str:
    return f"{n:,}"


def _parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The (encoder, head) of a ``TaskModel``-like model, or a clear failure."""
    encoder, head = getattr(model, "encoder", None), getattr(model, "head", None)
    expect(
        isinstance(encoder, nn.Module) and isinstance(head, nn.Module),
        "the model's parts",
        "a TaskModel with .encoder and .head (ftcourse.heads.TaskModel(encoder, head))",
        type(model).__name__,
    )
    return encoder, head


def lora_parameter_count(model: nn.Module) -> int:
    """Parameters that belong to LoRA itself (``lora_A`` / ``lora_B``), trainable or not."""
    return sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)


def _tiny_batch(model: nn.Module, encoder: nn.Module, batch_size: int = 2, length: int = 8) -> dict:
    """Random token ids the encoder accepts, and labels the head can score."""
    config = getattr(encoder, "config", None)
    vocab = getattr(config, "vocab_size", 100)
    generator = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    input_ids = torch.randint(1, vocab, (batch_size, length), generator=generator).to(device)
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": torch.zeros(batch_size, dtype=torch.long, device=device),
    }


def gradients_after_backward(model: nn.Module) -> dict:
    """One forward and backward pass on a tiny random batch; returns which parameters got a
    gradient (``{"encoder": [names], "head": [names]}``). Gradients are cleared afterwards,
    so the model is left as it was found."""
    encoder, _ = _parts(model)
    was_training = model.training
    model.train()
    for parameter in model.parameters():
        parameter.grad = None
    output = model(**_tiny_batch(model, encoder))
    loss = output["loss"] if isinstance(output, dict) else output.loss
    expect(loss is not None, "the model's loss given labels", "a tensor", None,
           "A TaskModel returns {'loss', 'logits'} when called with labels=.")
    loss.backward()
    touched = {"encoder": [], "head": []}
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            touched["encoder" if name.startswith("encoder.") else "head"].append(name)
        parameter.grad = None
    model.train(was_training)
    return touched


def check_trainable(model: nn.Module, expected: int, regime: str) -> int:
    """The model has exactly ``expected`` trainable parameters."""
    found = count_parameters(model)["trainable"]
    expect(found == expected, f"trainable parameters of the {regime!r} regime", _fmt(expected), _fmt(found))
    return found


def check_frozen_regime(model: nn.Module) -> dict:
    """Frozen encoder + trainable head: only the head's parameters train, the encoder's all
    have ``requires_grad=False``, and after a backward pass no encoder parameter holds a
    gradient while the head's do."""
    encoder, head = _parts(model)
    head_parameters = sum(p.numel() for p in head.parameters())
    check_trainable(model, head_parameters, "frozen")
    moving = [name for name, p in encoder.named_parameters() if p.requires_grad]
    expect(not moving, "encoder parameters with requires_grad=True in the frozen regime", "none",
           f"{len(moving)} (e.g. {moving[:2]})", "Freeze the encoder: ftcourse.heads.set_regime(model, 'frozen').")
    touched = gradients_after_backward(model)
    expect(not touched["encoder"], "encoder parameters holding a gradient after backward()", "none (.grad is None)",
           f"{len(touched['encoder'])} (e.g. {touched['encoder'][:2]})")
    expect(bool(touched["head"]), "head parameters holding a gradient after backward()", "all of them", "none",
           "The head must train: check that its parameters have requires_grad=True.")
    print(f"frozen regime: OK (trainable {_fmt(head_parameters)} = the head's parameters; "
          "no gradient reached the encoder)")
    return count_parameters(model)


def check_finetune_regime(model: nn.Module) -> dict:
    """Full fine-tuning: every parameter trains, encoder and head."""
    _parts(model)
    counts = count_parameters(model)
    check_trainable(model, counts["total"], "finetune")
    touched = gradients_after_backward(model)
    expect(bool(touched["encoder"]), "encoder parameters holding a gradient after backward()",
           "some (the encoder trains)", "none")
    print(f"finetune regime: OK (all {_fmt(counts['total'])} parameters train)")
    return counts


def check_lora_regime(model: nn.Module, rank: int = LORA_RANK, targets=LORA_TARGETS) -> dict:
    """LoRA: only LoRA's matrices and the head train; the pretrained weights stay frozen, and
    LoRA's count is ``rank x (d_in + d_out)`` for each targeted layer of the encoder."""
    encoder, head = _parts(model)
    lora = lora_parameter_count(encoder)
    expect(lora > 0, "LoRA parameters (named lora_A / lora_B) in the encoder", "some", "none",
           "Wrap the encoder with peft.get_peft_model(encoder, LoraConfig(r=8, target_modules=[...])).")
    expected_lora = expected_lora_parameters(encoder, rank, targets)
    expect(lora == expected_lora, f"LoRA parameters at rank {rank} on {list(targets)}",
           _fmt(expected_lora), _fmt(lora))
    head_parameters = sum(p.numel() for p in head.parameters())
    check_trainable(model, lora + head_parameters, "lora")
    frozen_base = [n for n, p in encoder.named_parameters() if p.requires_grad and "lora_" not in n]
    expect(not frozen_base, "trainable encoder parameters that are not LoRA's", "none",
           f"{len(frozen_base)} (e.g. {frozen_base[:2]})")
    print(f"lora regime: OK (trainable {_fmt(lora)} LoRA + {_fmt(head_parameters)} head parameters)")
    return count_parameters(model)


def expected_lora_parameters(encoder: nn.Module, rank: int = LORA_RANK, targets=LORA_TARGETS) -> int:
    """``rank x (d_in + d_out)`` summed over the encoder's linear layers named by ``targets``
    (LoRA's own layers excluded), computed from the shapes, not from peft."""
    total = 0
    for name, module in encoder.named_modules():
        parts = name.split(".")
        if any(p.startswith("lora_") for p in parts) or "base_layer" in parts:
            continue
        if parts[-1] in targets and hasattr(module, "in_features") and hasattr(module, "out_features"):
            total += rank * (module.in_features + module.out_features)
    return total


def bert_base_architecture() -> nn.Module:
    """bert-base-uncased's ``BertModel``, built from its configuration on the ``meta`` device:
    the exact shapes without the weights (no download, no memory)."""
    from transformers import BertModel

    from ..models import architecture_config

    with torch.device("meta"):
        return BertModel(architecture_config())


def check_lora_on_bert_base(add_lora: Callable[[nn.Module], nn.Module]) -> dict:
    """Apply the student's ``add_lora(encoder)`` to bert-base-uncased's architecture and check
    the LoRA paper's count: 294,912 LoRA parameters, 0.27% of the model's."""
    model = add_lora(bert_base_architecture())
    expect(isinstance(model, nn.Module), "what add_lora(encoder) returns", "a model (nn.Module)", type(model).__name__)
    lora = lora_parameter_count(model)
    counts = count_parameters(model)
    expect(lora == BERT_BASE_LORA_PARAMETERS, "LoRA's own parameters on bert-base-uncased (r=8, query and value)",
           _fmt(BERT_BASE_LORA_PARAMETERS), _fmt(lora),
           "Use rank r=8 and target_modules=['query', 'value'].")
    expect(counts["trainable"] == lora, "trainable parameters after add_lora", f"{_fmt(lora)} (LoRA's only)",
           _fmt(counts["trainable"]), "get_peft_model freezes the base model; do not unfreeze it.")
    percent = 100 * counts["trainable"] / counts["total"]
    expect(round(percent, 2) == BERT_BASE_LORA_PERCENT, "trainable share of bert-base with LoRA",
           f"{BERT_BASE_LORA_PERCENT}%", f"{percent:.4f}%")
    print(f"LoRA on bert-base-uncased: OK ({_fmt(lora)} of {_fmt(counts['total'])} parameters train: {percent:.2f}%)")
    return {"lora": lora, "total": counts["total"], "percent": percent}


def check_train_loop(train_loop: Callable, build_model: Callable, data, lr: float = 1e-3) -> dict:
    """``train_loop(model, data, lr, epochs, seed)`` on a few examples, one epoch: on the frozen regime
    the head moves and the encoder does not; on the full regime the encoder moves too; it returns a
    positive number of seconds per epoch."""
    few = data.select(range(min(16, len(data))))
    moved = {}
    for regime in ("frozen", "finetune"):
        model = build_model(regime)
        encoder, head = _parts(model)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        seconds = train_loop(model, few, lr, 1, 0)
        expect(isinstance(seconds, (int, float)) and seconds > 0, f"what train_loop returns ({regime})",
               "the seconds per epoch, a positive number", seconds)
        changed = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
        in_head = {n for n in changed if n.startswith("head.")}
        in_encoder = changed - in_head
        expect(bool(in_head), f"head parameters that changed in the {regime!r} regime", "all of them", "none",
               "Does the loop call opt.step() on the parameters that train?")
        if regime == "frozen":
            expect(not in_encoder, "encoder parameters that changed in the frozen regime", "none",
                   f"{len(in_encoder)} (e.g. {sorted(in_encoder)[:2]})")
        else:
            expect(bool(in_encoder), "encoder parameters that changed in the full regime", "most of them", "none")
        moved[regime] = len(changed)
    print(f"train_loop: OK (frozen: only the head moved; full fine-tuning: {moved['finetune']} tensors moved)")
    return moved


def check_regime_result(row: dict, regime: str | None = None) -> dict:
    """One measured run: the keys of ``RESULT_KEYS`` with sensible values."""
    expect(isinstance(row, dict), "a run's result", "a dict", type(row).__name__)
    missing = [key for key in RESULT_KEYS if key not in row]
    expect(not missing, "keys of a run's result", list(RESULT_KEYS), f"{sorted(row)} (missing {missing})")
    if regime is not None:
        expect(row["regime"] == regime, "the result's regime", repr(regime), repr(row["regime"]))
    expect(0.0 <= float(row["accuracy"]) <= 1.0, "accuracy", "a fraction in [0, 1]", row["accuracy"])
    expect(float(row["seconds_per_epoch"]) > 0, "seconds per epoch", "a positive time", row["seconds_per_epoch"])
    expect(int(row["trainable"]) > 0, "trainable parameters", "a positive count", row["trainable"])
    expect(float(row["peak_mib"]) >= 0, "peak memory (MiB)", "zero or more", row["peak_mib"])
    return row


def check_seed_summary(summarize: Callable) -> dict:
    """``summarize([accuracies])`` gives the mean, the sample standard deviation and the
    range (max - min) of several seeds' accuracies."""
    values = [0.80, 0.84, 0.78, 0.90]
    found = summarize(values)
    expect(isinstance(found, dict), "summarize(accuracies)", "a dict with mean, std, range", type(found).__name__)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    expected = {"mean": mean, "std": std, "range": max(values) - min(values)}
    for key, value in expected.items():
        expect(key in found and math.isclose(float(found[key]), value, rel_tol=1e-6, abs_tol=1e-9),
               f"summarize({values})[{key!r}]", f"{value:.6f}", found.get(key),
               "std is the sample standard deviation (divide by n - 1)." if key == "std" else "")
    print(f"summarize: OK (mean {mean:.4f}, std {std:.4f}, range {expected['range']:.4f} on a known example)")
    return found


# ----------------------------------------------------------------------------- the grader's own


def check_lora_targets(add_lora: Callable[[nn.Module], nn.Module], rank: int = LORA_RANK, targets=LORA_TARGETS) -> None:
    """LoRA sits on exactly the ``targets`` of every layer, at rank ``rank`` (checked on a tiny
    random BERT, so it is quick and independent of the course's encoder)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    model = add_lora(BertModel(config))
    wrapped = sorted({name.split(".lora_A")[0] for name, _ in model.named_modules() if name.endswith(".lora_A")})
    short = sorted({name.rsplit(".", 1)[-1] for name in wrapped})
    expect(short == sorted(targets), "the layers LoRA wraps", sorted(targets), short)
    expect(len(wrapped) == len(targets) * config.num_hidden_layers, "LoRA-wrapped layers",
           f"{len(targets)} per layer x {config.num_hidden_layers} layers", len(wrapped))
    ranks = {p.shape[0] for n, p in model.named_parameters() if "lora_A" in n}
    expect(ranks == {rank}, "LoRA's rank (rows of lora_A)", rank, sorted(ranks))


def check_results(results, build_model: Callable[[str], nn.Module]) -> None:
    """The measured table: one valid row per regime, whose trainable count is the model's."""
    expect(isinstance(results, (list, tuple)), "results", "a list of dicts, one per regime", type(results).__name__)
    found = [row.get("regime") if isinstance(row, dict) else row for row in results]
    expect(sorted(found) == sorted(REGIMES), "the regimes measured", list(REGIMES), found)
    counts = {}
    for row in results:
        check_regime_result(row)
        counts[row["regime"]] = int(row["trainable"])
        actual = count_parameters(build_model(row["regime"]))["trainable"]
        expect(counts[row["regime"]] == actual, f"trainable parameters reported for {row['regime']!r}",
               _fmt(actual), _fmt(counts[row["regime"]]))
    expect(counts["frozen"] < counts["lora"] < counts["finetune"], "trainable parameters",
           "frozen < lora < finetune", counts)


def check_stability(stability, summarize: Callable, seeds) -> None:
    """The seed study: for each regime, one valid run per seed, and the summary matches."""
    expect(isinstance(stability, dict), "stability", "a dict: regime -> list of runs", type(stability).__name__)
    expect(sorted(stability) == sorted(REGIMES), "the regimes of the seed study", sorted(REGIMES), sorted(stability))
    for regime, runs in stability.items():
        found = sorted(run.get("seed") for run in runs)
        expect(found == sorted(seeds), f"seeds run for {regime!r}", sorted(seeds), found)
        for run in runs:
            check_regime_result(run, regime)
        summary = summarize([run["accuracy"] for run in runs])
        expect(min(r["accuracy"] for r in runs) - 1e-9 <= summary["mean"] <= max(r["accuracy"] for r in runs) + 1e-9,
               f"the mean accuracy of {regime!r}", "between the runs' lowest and highest", summary["mean"])
