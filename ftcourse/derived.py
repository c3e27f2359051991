"""The course's own arithmetic about bert-base, each figure computed from its formula, never
typed in: what the course text claims (109.5M parameters, 418 MiB per fully tuned task,
LoRA r8 on query and value 294,912 = 0.27% = 1.13 MiB, a 6 KiB head). No paper printed these,
so a column that shows them says "derived", never "published" (``ftcourse.published``).

The lessons set these beside what they measure on real models (``ftcourse.costs`` builds
``BertModel`` and peft's LoRA on ``BertConfig()``): two independent computations of one
number, so the check can fail.

    >>> from ftcourse import derived
    >>> derived.bert_base_parameters()
    109482240
    >>> derived.lora_parameters(rank=8, targets=("query", "value"))
    294912
"""

from __future__ import annotations

#: bert-base-uncased's shape: BertConfig()'s defaults (Devlin et al. 2019, Table/Section 3).
BERT_BASE_SHAPE = {"vocab": 30522, "positions": 512, "token_types": 2, "hidden": 768, "layers": 12,
                   "intermediate": 3072}
FP32_BYTES = 4
MIB, KIB = 2**20, 2**10
#: The course text's setting: LoRA at rank 8 on the attention's query and value projections.
LORA_RANK, LORA_TARGETS = 8, ("query", "value")
#: How many tasks share one backbone in the course's storage comparison.
TASKS = 8


def bert_base_parameters(with_pooler: bool = True, shape: dict = BERT_BASE_SHAPE) -> int:
    """Counted layer by layer: embeddings (words, positions, token types, LayerNorm), then per
    layer the four attention projections, the feed-forward pair and two LayerNorms, then the
    pooler (dense + bias) that ``BertModel`` carries."""
    h, i = shape["hidden"], shape["intermediate"]
    embeddings = (shape["vocab"] + shape["positions"] + shape["token_types"]) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * (2 * h)
    pooler = h * h + h if with_pooler else 0
    return embeddings + shape["layers"] * layer + pooler


def linear_head_parameters(hidden: int = BERT_BASE_SHAPE["hidden"], num_labels: int = 2) -> int:
    return hidden * num_labels + num_labels


def lora_parameters(rank: int = LORA_RANK, targets=LORA_TARGETS, shape: dict = BERT_BASE_SHAPE) -> int:
    """B (d_out x r) and A (r x d_in) on each targeted projection of every layer; query and
    value are hidden x hidden."""
    return shape["layers"] * len(targets) * rank * (shape["hidden"] + shape["hidden"])


def share_percent(part: int, whole: int) -> float:
    return 100 * part / whole


def mib(parameters: int) -> float:
    return parameters * FP32_BYTES / MIB


def kib(parameters: int) -> float:
    return parameters * FP32_BYTES / KIB


def claims(rank: int = LORA_RANK, targets=LORA_TARGETS, tasks: int = TASKS, num_labels: int = 2) -> dict:
    """Every figure of the course text's cost claims, computed: parameters, shares, sizes in
    fp32 (MiB = 2**20 bytes, KiB = 2**10), how many times less a LoRA task stores than a full
    copy, and ``tasks`` LoRA tasks on one backbone."""
    backbone = bert_base_parameters()
    head = linear_head_parameters(num_labels=num_labels)
    lora = lora_parameters(rank, targets)
    return {
        "backbone_parameters": backbone,
        "backbone_mib": mib(backbone),
        "head_parameters": head,
        "head_kib": kib(head),
        "lora_parameters": lora,
        "lora_percent": share_percent(lora, backbone),
        "lora_task_mib": mib(lora + head),
        "times_less_than_full_copy": (backbone + head) / (lora + head),
        "tasks": tasks,
        "tasks_total_mib": mib(backbone + tasks * (lora + head)),
    }
