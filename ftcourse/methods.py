"""Which parameters move: every way the course adapts an encoder, as a builder of the model to train.

A method takes a copy of the encoder and returns it with only its own parameters trainable;
``build_model`` puts the head on top. Lesson 3b trains every one of them (``frontier``), lesson
3c the ground between the extremes (``ablations``), and the experiment engine builds any of
them from a run's spec (``experiments.engine``):

- ``frozen + linear head``: none of the encoder's (the head alone);
- ``BitFit`` (Ben Zaken et al., 2022): the encoder's biases;
- ``prompt tuning`` (Lester et al., 2021): a few input vectors before the sentence;
- ``(IA)³`` (Liu et al., 2022): one scaling vector per targeted projection;
- ``LoRA`` (Hu et al., 2021) and ``DoRA`` (Liu et al., 2024): low-rank updates ``B·A``;
- ``full fine-tuning``: every weight;
- ``freeze_lower``: the embeddings and the lower ``k`` layers frozen, the rest trained;
- ``reinitialized``: the same architecture from fresh weights (what pretraining buys).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from . import costs, heads, lora, training

# The same settings as lesson 3's bert-base accounting of these methods counts.
NUM_VIRTUAL_TOKENS = costs.DEFAULT_NUM_VIRTUAL_TOKENS
EVERY_PROJECTION = costs.ALL_PROJECTIONS


# ----------------------------------------------------------------------------- the methods


_train_only = costs.train_only  # requires_grad on exactly the parameters whose name it accepts


def _lora(rank: int, targets=("query", "value"), use_dora: bool = False):
    def build(encoder):
        import dataclasses

        from peft import inject_adapter_in_model

        settings = dataclasses.replace(lora.lora_config(rank, targets), use_dora=use_dora)  # alpha = r, dropout 0.1
        return _train_only(inject_adapter_in_model(settings, encoder), lambda name: "lora_" in name)
    return build


def _ia3(encoder):
    from peft import IA3Config, inject_adapter_in_model

    # peft's own targets for BERT (its suffix "output.dense" takes the attention's output too).
    settings = IA3Config(target_modules=["key", "value", "output.dense"], feedforward_modules=["output.dense"])
    return _train_only(inject_adapter_in_model(settings, encoder), lambda name: "ia3_" in name)


class PromptTunedEncoder(nn.Module):
    """``peft``'s prompt tuning on a bare encoder: ``num_virtual_tokens`` learned vectors go
    before the sentence's embeddings, and everything else stays frozen. The states of the
    virtual positions are dropped from the output, so a head reads the sentence's own
    positions ([CLS] still first) exactly as it does for every other method."""

    def __init__(self, encoder: nn.Module, num_virtual_tokens: int = NUM_VIRTUAL_TOKENS):
        super().__init__()
        from peft import PromptTuningConfig, TaskType, get_peft_model

        self.config = encoder.config
        self.num_virtual_tokens = num_virtual_tokens
        self.peft = get_peft_model(encoder, PromptTuningConfig(task_type=TaskType.FEATURE_EXTRACTION,
                                                               num_virtual_tokens=num_virtual_tokens))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **_):
        states = self.peft(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return BaseModelOutput(last_hidden_state=states[:, self.num_virtual_tokens:])


@dataclass(frozen=True)
class Method:
    """One point of the frontier: how it changes the encoder, and the learning rates its
    validation sweep tries (method-typical ranges: a few parameters want big steps)."""

    name: str
    setting: str
    lrs: tuple
    build: Callable[[nn.Module], nn.Module]  # a copy of the encoder -> it with only the method's parameters trainable


# The grids: typical ranges, recentred once on a first sweep's validation accuracy (600 SST-2
# sentences, 1 epoch, seed 0; never dev), e.g. the head alone 1e-3 0.600 vs 1e-2 0.770, LoRA r=8
# 1e-3 0.607 vs 4e-3 0.783, full fine-tuning 3e-5 0.680 vs 1e-4 0.780: few steps want big ones.
METHODS = (
    Method("frozen + linear head", "the head alone", (1e-2, 4e-2), lambda e: _train_only(e, lambda n: False)),
    Method("BitFit", "every bias", (1e-3, 4e-3), lambda e: _train_only(e, lambda n: n.endswith("bias"))),
    Method("prompt tuning", f"{NUM_VIRTUAL_TOKENS} virtual tokens", (3e-1, 1.2), PromptTunedEncoder),
    Method("(IA)³", "key, value, output projections", (1e-2, 4e-2), _ia3),
    Method("LoRA r=1", "query, value", (2e-3, 8e-3), _lora(1)),
    Method("LoRA r=8", "query, value", (2e-3, 8e-3), _lora(8)),
    Method("LoRA r=32", "query, value", (2e-3, 8e-3), _lora(32)),
    Method("LoRA r=8, every projection", "attention and MLP", (2e-3, 8e-3), _lora(8, EVERY_PROJECTION)),
    Method("DoRA r=8", "query, value", (2e-3, 8e-3), _lora(8, use_dora=True)),
    Method("full fine-tuning", "every weight", (1e-4, 4e-4), lambda e: _train_only(e, lambda n: True)),
)
METHOD_NAMES = tuple(m.name for m in METHODS)
FROZEN = METHODS[0].name  # the head alone: its chosen lr is every method's head lr


def method(name: str) -> Method:
    for m in METHODS:
        if m.name == name:
            return m
    raise ValueError(f"Unknown method {name!r}. Known methods: {', '.join(METHOD_NAMES)}.")


def build_model(m: Method, encoder: nn.Module, num_labels: int, pooling: str = "cls", seed: int = 0) -> heads.TaskModel:
    """``head(m(copy of encoder))``; ``encoder`` itself is never modified. The head is always trained."""
    torch.manual_seed(seed)  # the head's initialisation (and prompt tuning's vectors) follow the seed
    backbone = m.build(copy.deepcopy(encoder))
    return heads.TaskModel(backbone, heads.SentenceClassifier(encoder.config.hidden_size, num_labels, pooling=pooling))


def trainable_split(model: heads.TaskModel) -> dict:
    """The method's own trainable parameters and the head's, apart."""
    method_count = sum(p.numel() for p in model.encoder.parameters() if p.requires_grad)
    head_count = sum(p.numel() for p in model.head.parameters() if p.requires_grad)
    return {"method": method_count, "head": head_count}


# ----------------------------------------------------------------------------- the ground between


def encoder_depth(encoder: nn.Module) -> int:
    """The number of Transformer layers of a BERT-style encoder."""
    depth = getattr(getattr(encoder, "config", None), "num_hidden_layers", None)
    if not depth:
        raise ValueError(f"{type(encoder).__name__} has no config.num_hidden_layers: pass a BERT-style encoder.")
    return depth


def freeze_lower(encoder: nn.Module, k: int) -> nn.Module:
    """Freeze ``encoder``'s embeddings and its lower ``k`` Transformer layers (in place; returns
    it). ``k = 0`` freezes the embeddings only; ``k`` = the depth freezes everything."""
    depth = encoder_depth(encoder)
    if not 0 <= k <= depth:
        raise ValueError(f"k={k} is outside this encoder's 0..{depth} layers. Fix: pass k from 0 (the embeddings "
                         f"only) to {depth} (every layer).")
    for name, parameter in encoder.named_parameters():
        layer = training.layer_depth(name, depth)  # 0: embeddings, i + 1: layer i, depth + 1: above
        parameter.requires_grad = layer > k
    return encoder


def freezing_depths(encoder: nn.Module) -> tuple:
    """The ``k`` values a study of partial freezing reads: none, a third, two thirds and all of
    the layers (0, 2, 4, 6 on a 6-layer encoder; 0, 4, 8, 12 on bert-base)."""
    depth = encoder_depth(encoder)
    return tuple(sorted({0, depth // 3, 2 * depth // 3, depth}))


def reinitialized(encoder: nn.Module, seed: int = 0) -> nn.Module:
    """A new encoder of ``encoder``'s architecture and config, its weights drawn by the
    architecture's own initialisation (seeded): the same model, minus everything pretraining
    put in it."""
    torch.manual_seed(seed)
    if getattr(encoder, "pooler", "no pooler option") is None:  # a BertModel built without its pooler
        return type(encoder)(encoder.config, add_pooling_layer=False)
    return type(encoder)(encoder.config)
