"""What each adaptation regime costs: parameters to train, bytes to store, per task.

Every figure is computed from a real architecture, never typed: the backbone is built from
its ``transformers`` config (on the ``meta`` device, so counting bert-base costs no memory),
LoRA and prompt tuning are real ``peft`` models, and Houlsby adapters are real
``nn.Linear`` bottlenecks sized from the same config.

The regimes, for a backbone of ``B`` parameters and ``n`` tasks:

- ``full fine-tuning``: every task stores its own copy of the backbone and its head;
- ``frozen + linear head``: one shared backbone, each task stores a head;
- ``LoRA``: one shared backbone, each task stores low-rank updates ``B·A`` and a head;
- ``prompt tuning``: one shared backbone, each task stores virtual-token embeddings and a head;
- ``Houlsby adapters``: one shared backbone, each task stores bottleneck adapters (and the
  layer norms, which Houlsby et al. train too) and a head.

``peft_method_costs`` adds the other parameter-efficient methods a course reader meets
(BitFit, (IA)³, LoRA at several ranks and targets, DoRA), each counted on the real model
that method trains (a ``peft`` model where ``peft`` implements it), so a published count
is checked against the library, not against our arithmetic.

Sizes are bytes; ``MIB = 2**20`` bytes and ``KIB = 2**10`` bytes (the "MiB" and "KiB"
of the figures this module reproduces).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from torch import nn

from .heads import count_parameters
from .report import Table

KIB = 2**10
MIB = 2**20
BYTES_PER_PARAMETER = {"fp32": 4, "fp16": 2, "bf16": 2}

DEFAULT_TARGETS = ("query", "value")
DEFAULT_NUM_VIRTUAL_TOKENS = 20  # Lester et al. (2021) use 5..150; 20 is a common middle
DEFAULT_ADAPTER_SIZE = 64  # Houlsby et al. (2019) sweep bottleneck sizes 8, 64, 256

# Every attention and MLP projection of a BERT layer (the pooler's ``dense`` is not one):
# ``output.dense`` alone would also match ``attention.output.dense``; the list says both.
ALL_PROJECTIONS = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")
DEFAULT_LORA_RANKS = (1, 8, 32)
# Why the Houlsby row is counted, not built: checked with ``pip download adapters --no-deps``.
HOULSBY_NOTE = ("counted from BottleneckAdapter shapes, not built by a library: peft has no Houlsby adapter and "
                "AdapterHub's adapters 1.3.0 requires transformers~=4.57.6, not this course's 5.x")

REGIME_NAMES = (
    "full fine-tuning",
    "frozen + linear head",
    "LoRA",
    "prompt tuning",
    "Houlsby adapters",
)


# ----------------------------------------------------------------------------- counting


def _config(config=None):
    """bert-base-uncased's configuration (``BertConfig()``) unless another is given."""
    if config is None:
        from .models import architecture_config

        return architecture_config()
    return config


def build_backbone(config=None, add_pooling_layer: bool = True, device="meta") -> nn.Module:
    """``BertModel(config)`` (bert-base-uncased by default), on the ``meta`` device unless
    told otherwise: shapes without memory, so counting is instant."""
    from transformers import AutoModel

    config = _config(config)
    with torch.device(device):
        return AutoModel.from_config(config, add_pooling_layer=add_pooling_layer)


def backbone_parameters(config=None, add_pooling_layer: bool = True) -> int:
    """Parameters of the whole backbone. bert-base with its pooler: 109,482,240."""
    return count_parameters(build_backbone(config, add_pooling_layer))["total"]


def linear_head_parameters(hidden_size: int = 768, num_labels: int = 2) -> int:
    """A linear classifier over the [CLS] state: ``hidden_size × num_labels`` weights plus
    ``num_labels`` biases (bert-base, 2 labels: 1,538)."""
    if hidden_size < 1 or num_labels < 1:
        raise ValueError(f"hidden_size and num_labels must be positive, got {hidden_size}, {num_labels}.")
    return hidden_size * num_labels + num_labels


def sequence_classifier(config=None, num_labels: int = 2) -> nn.Module:
    """``BertForSequenceClassification`` (bert-base by default) with a ``num_labels`` linear
    head named ``classifier``, on the ``meta`` device: what every method below adapts."""
    from transformers import AutoModelForSequenceClassification

    config = copy.deepcopy(_config(config))
    config.num_labels = num_labels
    with torch.device("meta"):
        return AutoModelForSequenceClassification.from_config(config)


def lora_sequence_classifier(config=None, rank: int = 8, targets: Sequence[str] = DEFAULT_TARGETS,
                             num_labels: int = 2, alpha: int | None = None, use_dora: bool = False):
    """A real ``peft`` LoRA model over ``BertForSequenceClassification`` on the ``meta``
    device, as ``get_peft_model`` builds it for ``task_type=SEQ_CLS``. Its classifier is in
    ``modules_to_save``, so ``print_trainable_parameters()`` counts it with LoRA.
    ``use_dora`` makes it DoRA (Liu et al., 2024): LoRA plus a trained magnitude per output."""
    import dataclasses

    from peft import TaskType, get_peft_model

    from .lora import add_lora, lora_config

    model = sequence_classifier(config, num_labels)
    if not use_dora:
        return add_lora(model, rank=rank, targets=targets, alpha=alpha, task_type=TaskType.SEQ_CLS)
    dora = dataclasses.replace(lora_config(rank, targets, alpha, task_type=TaskType.SEQ_CLS), use_dora=True)
    return get_peft_model(model, dora)


def split_trainable(peft_model, head: str = "classifier") -> dict:
    """A peft model's trainable parameters, split into the adapter's own (``adapter``:
    LoRA matrices or prompt embeddings) and the task head copied into ``modules_to_save``
    (``head``). ``peft``'s ``print_trainable_parameters()`` reports their sum. peft keeps
    the original head too, frozen: only the trained copy counts. On a plain model (no peft)
    the head is the top-level module named ``head``."""
    adapter = head_count = 0
    for name, parameter in peft_model.named_parameters():
        if not parameter.requires_grad:
            continue
        if "modules_to_save" in name or name.split(".", 1)[0] == head:
            head_count += parameter.numel()
        else:
            adapter += parameter.numel()
    return {"adapter": adapter, "head": head_count, "trainable": adapter + head_count}


def lora_parameters(config=None, rank: int = 8, targets: Sequence[str] = DEFAULT_TARGETS) -> int:
    """LoRA's own parameters (head excluded), counted on a real peft model: for each
    targeted ``d_in → d_out`` linear layer, ``A`` is ``r × d_in`` and ``B`` is ``d_out × r``.
    bert-base, r=8, query and value: 12 × 2 × (768×8 + 8×768) = 294,912."""
    return split_trainable(lora_sequence_classifier(config, rank, targets))["adapter"]


def lora_parameters_formula(config=None, rank: int = 8, targets: Sequence[str] = DEFAULT_TARGETS) -> int:
    """The same count by hand, from the shapes of the targeted linear layers, so the
    notebook can show the arithmetic and a test can hold peft to it."""
    from .lora import matching_linear_layers

    backbone = build_backbone(config)
    return sum(rank * (layer.in_features + layer.out_features)
               for layer in matching_linear_layers(backbone, targets).values())


def prompt_tuning_parameters(config=None, num_virtual_tokens: int = DEFAULT_NUM_VIRTUAL_TOKENS) -> int:
    """Prompt tuning's own parameters (head excluded), counted on a real peft
    ``PromptTuningConfig`` model: ``num_virtual_tokens × hidden_size`` embeddings."""
    return split_trainable(prompt_tuning_classifier(config, num_virtual_tokens))["adapter"]


def prompt_tuning_classifier(config=None, num_virtual_tokens: int = DEFAULT_NUM_VIRTUAL_TOKENS,
                             num_labels: int = 2):
    """A real ``peft`` prompt-tuning model (``PromptTuningConfig``, ``SEQ_CLS``) over the
    meta-device classifier: ``num_virtual_tokens`` trained embeddings prepended to the input."""
    from peft import PromptTuningConfig, TaskType, get_peft_model

    if num_virtual_tokens < 1:
        raise ValueError(f"num_virtual_tokens must be at least 1, got {num_virtual_tokens}.")
    return get_peft_model(sequence_classifier(config, num_labels),
                          PromptTuningConfig(task_type=TaskType.SEQ_CLS, num_virtual_tokens=num_virtual_tokens))


def ia3_classifier(config=None, num_labels: int = 2):
    """A real ``peft`` (IA)³ model (Liu et al., 2022) with peft's own BERT defaults for
    ``SEQ_CLS``: ``target_modules`` key, value, output.dense and ``feedforward_modules``
    output.dense. peft matches a name by its suffix, so ``output.dense`` is both the FFN's
    output and ``attention.output.dense``: four learned vectors per layer, scaling the
    outputs of key and value (768 each) and the inputs of both output projections (768, 3072)."""
    from peft import IA3Config, TaskType, get_peft_model

    return get_peft_model(sequence_classifier(config, num_labels), IA3Config(task_type=TaskType.SEQ_CLS))


def bitfit_classifier(config=None, num_labels: int = 2) -> nn.Module:
    """BitFit (Ben Zaken et al., 2022) on the real classifier: every bias trains (the
    projections', the LayerNorms' and the pooler's) and the head; peft has no BitFit config,
    so the ``requires_grad`` flags are set by name, as BitFit does."""
    return train_only(sequence_classifier(config, num_labels),
                       lambda name: name.endswith(".bias") or name.startswith("classifier."))


def train_only(model: nn.Module, trains) -> nn.Module:
    """``model`` with ``requires_grad`` on exactly the parameters whose name ``trains`` accepts."""
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(trains(name))
    return model


class BottleneckAdapter(nn.Module):
    """Houlsby et al. (2019): ``x + up(gelu(down(x)))``, a residual bottleneck of size ``m``
    inserted twice per layer (after attention and after the feed-forward block)."""

    def __init__(self, hidden_size: int, bottleneck_size: int):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck_size)
        self.up = nn.Linear(bottleneck_size, hidden_size)

    def forward(self, x):
        return x + self.up(nn.functional.gelu(self.down(x)))


def houlsby_adapter_parameters(config=None, bottleneck_size: int = DEFAULT_ADAPTER_SIZE,
                               train_layer_norms: bool = True) -> int:
    """Houlsby adapters' own parameters (head excluded), from real modules sized by the
    config: two ``BottleneckAdapter``s per layer, ``2·(d·m + m + m·d + d)`` each layer,
    plus the layer's two LayerNorms when ``train_layer_norms`` (as in the paper).
    bert-base, m=64: 12 × 2 × 99,136 + 12 × 2 × 1,536 = 2,416,128."""
    if bottleneck_size < 1:
        raise ValueError(f"bottleneck_size must be at least 1, got {bottleneck_size}.")
    config = _config(config)
    with torch.device("meta"):
        adapter = BottleneckAdapter(config.hidden_size, bottleneck_size)
        layer_norm = nn.LayerNorm(config.hidden_size)
    norms = count_parameters(layer_norm)["total"] if train_layer_norms else 0
    per_layer = 2 * count_parameters(adapter)["total"] + 2 * norms
    return config.num_hidden_layers * per_layer


# ----------------------------------------------------------------------------- storage


@dataclass(frozen=True)
class RegimeCost:
    """What one regime trains and stores. ``shared`` is stored once for all tasks (the
    frozen backbone); ``per_task`` is stored again for every task (its own parameters
    and its head)."""

    regime: str
    detail: str  # e.g. "r=8 on query, value"
    trainable: int  # parameters trained per task (head included)
    head: int  # of which the task head
    shared: int  # parameters stored once
    per_task: int  # parameters stored per task
    dtype: str = "fp32"

    @property
    def bytes_per_parameter(self) -> int:
        return BYTES_PER_PARAMETER[self.dtype]

    @property
    def per_task_bytes(self) -> int:
        return self.per_task * self.bytes_per_parameter

    @property
    def shared_bytes(self) -> int:
        return self.shared * self.bytes_per_parameter

    def total_bytes(self, n_tasks: int) -> int:
        """Bytes to store ``n_tasks`` tasks: the shared part once, the per-task part n times."""
        if n_tasks < 0:
            raise ValueError(f"n_tasks must be 0 or more, got {n_tasks}.")
        return (self.shared_bytes if n_tasks else 0) + n_tasks * self.per_task_bytes


def regime_costs(config=None, rank: int = 8, targets: Sequence[str] = DEFAULT_TARGETS,
                 num_labels: int = 2, num_virtual_tokens: int = DEFAULT_NUM_VIRTUAL_TOKENS,
                 adapter_size: int = DEFAULT_ADAPTER_SIZE, dtype: str = "fp32",
                 regimes: Iterable[str] = REGIME_NAMES) -> list[RegimeCost]:
    """The cost of each regime for ``config`` (bert-base by default) with a linear
    sentence-classification head of ``num_labels`` outputs."""
    if dtype not in BYTES_PER_PARAMETER:
        raise ValueError(f"Unknown dtype {dtype!r}. Known: {', '.join(BYTES_PER_PARAMETER)}.")
    regimes = tuple(regimes)
    unknown = [r for r in regimes if r not in REGIME_NAMES]
    if unknown:
        raise ValueError(f"Unknown regimes {unknown}. Known regimes: {', '.join(REGIME_NAMES)}.")
    config = _config(config)
    backbone = backbone_parameters(config)
    head = linear_head_parameters(config.hidden_size, num_labels)
    own = {
        "full fine-tuning": (backbone, "every weight, a full copy per task"),
        "frozen + linear head": (0, "[CLS] features, backbone shared"),
        "LoRA": (lambda: lora_parameters(config, rank, targets), f"r={rank} on {', '.join(targets)}"),
        "prompt tuning": (lambda: prompt_tuning_parameters(config, num_virtual_tokens),
                          f"{num_virtual_tokens} virtual tokens"),
        "Houlsby adapters": (lambda: houlsby_adapter_parameters(config, adapter_size),
                             f"bottleneck {adapter_size}, 2 per layer, + layer norms"),
    }
    costs = []
    for regime in regimes:
        count, detail = own[regime]
        count = count() if callable(count) else count
        shared = 0 if regime == "full fine-tuning" else backbone
        costs.append(RegimeCost(regime, detail, trainable=count + head, head=head, shared=shared,
                                per_task=count + head, dtype=dtype))
    return costs


@dataclass(frozen=True)
class MethodCost(RegimeCost):
    """A ``RegimeCost`` that also knows the backbone it is a share of and how it was counted:
    ``counted`` is ``"peft model"``, ``"torch model"`` (the real classifier, flags set by
    hand) or ``"formula"`` (modules sized from the config, not inserted in a model)."""

    backbone: int = 0  # the backbone's parameters, pooler included: the share's denominator
    counted: str = "formula"
    note: str = ""

    @property
    def method_parameters(self) -> int:
        """The method's own trained parameters, head excluded."""
        return self.trainable - self.head

    @property
    def share(self) -> float:
        """The method's own parameters in percent of the backbone's."""
        return 100 * self.method_parameters / self.backbone


def peft_method_costs(config=None, num_labels: int = 2, ranks: Sequence[int] = DEFAULT_LORA_RANKS,
                      targets: Sequence[str] = DEFAULT_TARGETS,
                      num_virtual_tokens: int = DEFAULT_NUM_VIRTUAL_TOKENS,
                      adapter_size: int = DEFAULT_ADAPTER_SIZE, dtype: str = "fp32") -> list[MethodCost]:
    """Every parameter-efficient method's cost for ``config`` (bert-base by default), each
    counted on the real model it trains: the ``requires_grad`` parameters of a ``peft``
    model (or of the classifier with its flags set, for the regimes peft has no config for),
    split by ``split_trainable`` into the method's own and the head's (peft's frozen
    original of the head is not counted). Houlsby adapters alone are counted by formula
    (``HOULSBY_NOTE`` says why). Rows: frozen head, BitFit, prompt tuning, (IA)³, LoRA at
    each of ``ranks`` on ``targets``, LoRA r=8 on every projection, DoRA r=8, Houlsby, full
    fine-tuning; bytes per task are the method's and the head's, or the whole model's for
    full fine-tuning."""
    if dtype not in BYTES_PER_PARAMETER:
        raise ValueError(f"Unknown dtype {dtype!r}. Known: {', '.join(BYTES_PER_PARAMETER)}.")
    config = _config(config)
    backbone = backbone_parameters(config)
    on = ", ".join(targets)
    models = [  # (method, setting, how counted, builder of the real model)
        ("frozen + linear head", "[CLS] features, backbone shared", "torch model",
         lambda: train_only(sequence_classifier(config, num_labels), lambda name: name.startswith("classifier."))),
        ("BitFit", "every bias, layer norms' and pooler's too", "torch model",
         lambda: bitfit_classifier(config, num_labels)),
        ("prompt tuning", f"{num_virtual_tokens} virtual tokens", "peft model",
         lambda: prompt_tuning_classifier(config, num_virtual_tokens, num_labels)),
        ("(IA)³", "peft default: key, value, output.dense (attention's and FFN's)", "peft model",
         lambda: ia3_classifier(config, num_labels)),
        *[("LoRA", f"r={rank} on {on}", "peft model",
           lambda rank=rank: lora_sequence_classifier(config, rank, targets, num_labels)) for rank in ranks],
        ("LoRA", "r=8 on every attention and MLP projection", "peft model",
         lambda: lora_sequence_classifier(config, 8, ALL_PROJECTIONS, num_labels)),
        ("DoRA", f"r=8 on {on}", "peft model",
         lambda: lora_sequence_classifier(config, 8, targets, num_labels, use_dora=True)),
    ]
    costs = []
    for method, setting, counted, build in models:
        split = split_trainable(build())
        costs.append(MethodCost(method, setting, split["trainable"], split["head"], backbone, split["trainable"],
                                dtype, backbone, counted))
    head = linear_head_parameters(config.hidden_size, num_labels)
    houlsby = houlsby_adapter_parameters(config, adapter_size) + head
    costs.append(MethodCost("Houlsby adapters", f"bottleneck {adapter_size}, 2 per layer, + layer norms", houlsby,
                            head, backbone, houlsby, dtype, backbone, "formula", HOULSBY_NOTE))
    full = split_trainable(train_only(sequence_classifier(config, num_labels), lambda name: True))
    costs.append(MethodCost("full fine-tuning", "every weight, a full copy per task", full["trainable"], full["head"],
                            0, full["trainable"], dtype, backbone, "torch model"))
    return costs


def format_bytes(n_bytes: int) -> str:
    """``6,152 B (6.0 KiB)`` below a MiB, ``1.13 MiB`` above."""
    if n_bytes < MIB:
        return f"{n_bytes / KIB:.1f} KiB"
    return f"{n_bytes / MIB:,.2f} MiB"


def regime_storage_table(costs: Sequence[RegimeCost], n_tasks: int = 8) -> Table:
    """What each regime trains and stores: trainable parameters, share of the backbone, bytes
    per task, total for ``n_tasks``, and how many times less than full fine-tuning each regime
    stores per task (``lora.adapter_files_table`` lists one saved adapter's files instead)."""
    full = next((c for c in costs if c.regime == "full fine-tuning"), None)
    backbone = full.per_task - full.head if full else max(c.shared for c in costs)
    rows = [[c.regime, c.detail, c.trainable, 100 * (c.trainable - c.head) / backbone, format_bytes(c.per_task_bytes),
             full.per_task_bytes / c.per_task_bytes if full else None, c.total_bytes(n_tasks) / MIB] for c in costs]
    tasks = f"{n_tasks} tasks (MiB)"
    return Table(["regime", "detail", "trainable", "% of model", "per task", "x less", tasks], rows,
                 formats={"% of model": "{:.2f}%", "x less": "{:,.0f}x", tasks: "{:,.1f}"},
                 notes=[f"(% of model: the regime's own parameters, head excluded, over the backbone's "
                        f"{backbone:,}; sizes in {costs[0].dtype}, MiB = 2**20 bytes)"])


def method_costs_table(costs: Sequence[MethodCost]) -> Table:
    """What each parameter-efficient method trains and stores per task (``peft_method_costs``'s
    rows): its own parameters, the head's, their share of the backbone, MiB per task, and
    whether the count comes from a real model or a formula (a row's note says why)."""
    rows = [[c.regime, c.detail, c.method_parameters, c.head, c.share, c.per_task_bytes / MIB, c.counted]
            for c in costs]
    notes = [f"(share: the method's own parameters, head excluded, over the backbone's {costs[0].backbone:,}; "
             f"sizes in {costs[0].dtype}, MiB = 2**20 bytes; full fine-tuning stores the whole model per task)"]
    notes += [f"{c.regime}: {c.note}" for c in costs if c.note]
    return Table(["method", "setting", "method params", "head", "share %", "MiB per task", "counted"], rows,
                 formats={"share %": "{:.3f}", "MiB per task": "{:,.3f}"}, notes=notes)


def plot_storage(costs: Sequence[RegimeCost], max_tasks: int = 100, mark: int | None = None, ax=None,
                 references: Sequence[str] = ()):
    """Total bytes stored against the number of tasks, one line per regime (log scale:
    full fine-tuning grows by a whole model per task, the others by a sliver). Regimes named
    in ``references`` are drawn as dashed grey lines, so many methods' lines stay readable
    between them; past ten lines the colours repeat, so later lines are dash-dotted."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    tasks = list(range(1, max_tasks + 1))
    drawn = 0
    for cost in costs:
        reference = cost.regime in references
        style = {"color": "grey", "linestyle": "--"} if reference else {"linestyle": "-" if drawn < 10 else "-."}
        drawn += not reference
        ax.plot(tasks, [cost.total_bytes(n) / MIB for n in tasks], label=f"{cost.regime} ({cost.detail})", **style)
    if mark:
        ax.axvline(mark, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("number of tasks")
    ax.set_ylabel("total storage (MiB, log scale)")
    ax.set_title("Storage for n tasks: one shared backbone vs a copy per task")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return ax


# ----------------------------------------------------------------------------- interactive


def draw_storage(config=None, rank: int = 8, n_tasks: int = 8, targets: Sequence[str] = DEFAULT_TARGETS,
                 num_virtual_tokens: int = DEFAULT_NUM_VIRTUAL_TOKENS, max_tasks: int = 100) -> list[RegimeCost]:
    """Show the storage table and draw the storage plot for these settings (what the
    sliders redraw). Plots full fine-tuning, LoRA, prompt tuning and the frozen head."""
    import matplotlib.pyplot as plt

    if not targets:
        print("Pick at least one target module.")
        return []
    from IPython.display import display

    costs = regime_costs(config, rank=rank, targets=targets, num_virtual_tokens=num_virtual_tokens)
    display(regime_storage_table(costs, n_tasks))
    plotted = [c for c in costs if c.regime != "Houlsby adapters"]
    plot_storage(plotted, max_tasks=max(max_tasks, n_tasks), mark=n_tasks)
    plt.show()
    return costs


def draw_method_storage(config=None, n_tasks: int = 8, max_tasks: int = 100, num_labels: int = 2,
                        costs: Sequence[MethodCost] | None = None) -> list[MethodCost]:
    """Draw every method's storage line, Houlsby adapters included, with full fine-tuning
    and the frozen head as the grey references they fall between (``method_costs_table``
    is their table). Pass ``costs`` (``peft_method_costs``'s rows) to skip recounting."""
    import matplotlib.pyplot as plt

    costs = list(costs) if costs is not None else peft_method_costs(config, num_labels)
    ax = plot_storage(costs, max_tasks=max(max_tasks, n_tasks), mark=n_tasks,
                      references=("full fine-tuning", "frozen + linear head"))
    ax.set_title("Storage for n tasks, every method: one shared backbone vs a copy per task")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    plt.show()
    return costs


def storage_widgets(config=None, rank: int = 8, n_tasks: int = 8, targets: Sequence[str] = DEFAULT_TARGETS):
    """Sliders for the LoRA rank and the number of tasks, and a multiple choice of target
    modules (the backbone's linear layers), redrawing ``draw_storage``. Returns the widget
    box; display it after one explicit ``draw_storage(...)`` call, so a notebook executed
    without a widget frontend still shows the default table and figure."""
    import ipywidgets as widgets

    from .lora import linear_module_names

    config = _config(config)
    rank_slider = widgets.IntSlider(value=rank, min=1, max=64, description="rank r")
    tasks_slider = widgets.IntSlider(value=n_tasks, min=1, max=100, description="tasks n")
    target_choice = widgets.SelectMultiple(
        options=linear_module_names(build_backbone(config)), value=tuple(targets),
        description="targets", rows=6,
    )
    output = widgets.interactive_output(
        lambda rank, n_tasks, targets: draw_storage(config, rank, n_tasks, targets),
        {"rank": rank_slider, "n_tasks": tasks_slider, "targets": target_choice},
    )
    return widgets.VBox([widgets.HBox([widgets.VBox([rank_slider, tasks_slider]), target_choice]), output])


def lora_headline_figures(split: dict, backbone: int, per_task_bytes: int) -> list:
    """Lesson 3's cost figures for its headline, measured on the real peft model (``split``
    from ``split_trainable``, the ``backbone``'s parameter count, LoRA's ``per_task_bytes``),
    each with the course's derived figure as its note: no paper printed these counts."""
    from . import derived
    from .report import Figure

    claims = derived.claims()
    return [Figure("LoRA r8 parameters on bert-base", split["adapter"], None, "parameters",
                   f"derived: {claims['lora_parameters']:,}"),
            Figure("LoRA r8 share of bert-base", round(100 * split["adapter"] / backbone, 2), None, "%",
                   f"derived: {claims['lora_percent']:.2f}"),
            Figure("LoRA per task, with its head", round(per_task_bytes / MIB, 2), None, "MiB",
                   f"derived: {claims['lora_task_mib']:.2f}")]
