"""The experiment system: one engine, one store (a spec trains once), one chooser, and verdicts
that read the seeds' paired differences, each shown failing and tying on planted runs."""

import json

import pytest
import torch
from transformers import BertConfig, BertModel

from ftcourse import config, data, experiments, frontier
from ftcourse.experiments import RunRecord, RunSpec, RunStore, compare, paired
from test_frontier import toy


@pytest.fixture
def encoder():
    torch.manual_seed(0)
    return BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                vocab_size=60, max_position_embeddings=64), add_pooling_layer=False)


# ----------------------------------------------------------------------------- verdicts


def test_a_clear_paired_difference_beats_and_its_mirror_trails():
    c = paired({0: 0.81, 1: 0.83, 2: 0.80}, {0: 0.78, 1: 0.79, 2: 0.78}, "LoRA", "frozen")
    assert c.outcome == "beats" and c.low > 0 and c.verdict.startswith("LoRA beats frozen")
    assert c.mean == pytest.approx(3.0) and c.n == 3 and "95% CI" in c.verdict
    mirror = paired({0: 0.78, 1: 0.79, 2: 0.78}, {0: 0.81, 1: 0.83, 2: 0.80}, "frozen", "LoRA")
    assert mirror.outcome == "trails" and mirror.verdict.startswith("LoRA beats frozen")


def test_a_gap_inside_the_seeds_noise_is_a_tie():
    # the means differ by 0.7 points, but seed 1 reverses the order: the interval holds zero
    c = paired({0: 0.81, 1: 0.76, 2: 0.80}, {0: 0.78, 1: 0.79, 2: 0.78}, "LoRA", "frozen")
    assert c.outcome == "tie" and c.low < 0 < c.high and c.verdict.startswith("tie (3 seeds)")


def test_pairing_reads_differences_that_two_spreads_apart_would_hide():
    # every seed moves both by the same amount: unpaired spreads overlap, the paired difference is steady
    base = {0: 0.70, 1: 0.80, 2: 0.75}
    better = {s: v + 0.01 for s, v in base.items()}
    assert paired(better, base).outcome == "beats"


def test_one_seed_is_undecided_and_no_shared_seed_is_an_error():
    assert paired({0: 0.9}, {0: 0.5}).outcome == "undecided"
    with pytest.raises(ValueError, match="share no seed"):
        paired({0: 0.9}, {1: 0.5}, "a", "b")


def test_within_a_margin_is_decided_by_the_whole_interval():
    close = paired({0: 0.80, 1: 0.81, 2: 0.79}, {0: 0.81, 1: 0.82, 2: 0.80})
    assert close.within(3) == "yes"
    far = paired({0: 0.70, 1: 0.71, 2: 0.69}, {0: 0.81, 1: 0.82, 2: 0.80})
    assert far.within(3) == "no"
    noisy = paired({0: 0.70, 1: 0.82, 2: 0.79}, {0: 0.81, 1: 0.82, 2: 0.80})
    assert noisy.within(3) == "undecided"


# ----------------------------------------------------------------------------- engine, store, chooser


def test_a_spec_trains_once_and_a_second_caller_reads_the_same_record(encoder, tmp_path):
    store = RunStore(tmp_path)
    train, dev = toy(24, 0), toy(12, 1)
    spec = RunSpec("LoRA r=8", lr=5e-3, batch_size=8)
    first = experiments.run(spec, encoder, train, {"dev": dev}, store=store)
    again = experiments.run(spec, encoder, train, {"dev": dev}, store=RunStore(tmp_path))  # a second notebook
    assert store.trained == 1 and again == first and 0 <= first.dev <= 1
    assert first.steps == 3 and first.method_parameters == 2 * 2 * 8 * 64 and first.head_parameters == 66
    other = RunStore(tmp_path)
    experiments.run(spec.with_(seed=1), encoder, train, {"dev": dev}, store=other)  # another seed trains
    experiments.run(spec, encoder, toy(24, 5), {"dev": dev}, store=other)  # so do other data
    assert other.trained == 2 and other.read == 0
    stored = json.loads(next(tmp_path.glob("LoRA*.json")).read_text())
    assert stored["key"]["spec"]["method"] == "LoRA r=8" and stored["key"]["code"]


def test_a_stored_record_whose_key_differs_is_never_served(encoder, tmp_path):
    store = RunStore(tmp_path)
    spec, train, scored = RunSpec("frozen + linear head", lr=1e-2, batch_size=8), toy(16, 0), {"dev": toy(8, 1)}
    experiments.run(spec, encoder, train, scored, store=store)
    path = next(tmp_path.glob("*.json"))
    stored = json.loads(path.read_text())
    stored["key"]["code"] = "another version"
    path.write_text(json.dumps(stored))
    experiments.run(spec, encoder, train, scored, store=store)
    assert store.trained == 2


def test_the_engine_names_an_unknown_method_and_an_empty_split(encoder):
    with pytest.raises(ValueError, match="Unknown method 'Houlsby'"):
        RunSpec("Houlsby", lr=1e-3)
    with pytest.raises(ValueError, match="training split is empty"):
        experiments.train_run(RunSpec("k=1", lr=1e-3), encoder, toy(4, 0).select([]), {"dev": toy(4, 1)})


def test_the_chooser_reads_validation_and_extends_past_an_edge(encoder, tmp_path):
    store = RunStore(tmp_path)
    validation = data.carve_validation(toy(25, 1), 24)[1]
    with pytest.raises(data.ReportedSplitError):
        experiments.choose_lr(RunSpec("k=0", lr=1e-4, batch_size=8), (1e-4, 1e-3), encoder, toy(16, 0), toy(8, 2))
    choice = experiments.choose_lr(RunSpec("k=0", lr=1e-4, batch_size=8), (1e-4, 1e-3), encoder, toy(16, 0),
                                   validation, toy(8, 2), store=store, extensions=1)
    lrs = [r.lr for r in choice.tried]
    assert lrs[:2] == [1e-4, 1e-3] and len(lrs) == 3 and lrs[2] in (1e-3 * 4, 1e-4 / 4)
    assert choice.lr == max(choice.tried, key=lambda r: r.validation).lr
    # dev is scored but never read: reversing every dev score leaves the choice alone
    flipped = [RunRecord(**{**vars(r), "scores": {**r.scores, "dev": {"accuracy": 1 - r.dev}}}) for r in choice.tried]
    assert max(flipped, key=lambda r: r.validation).lr == choice.lr


def test_the_frontier_and_the_studies_share_one_set_of_runs(encoder, tmp_path):
    from ftcourse import ablations

    store = RunStore(tmp_path)
    profile = config.get_profile("smoke").with_(regime_batch_size=8)
    train, validation, dev = toy(24, 0), data.carve_validation(toy(25, 1), 24)[1], toy(12, 2)
    methods = [frontier.method(n) for n in (frontier.FROZEN, "LoRA r=8", "full fine-tuning")]
    made = frontier.frontier(encoder, train, validation, dev, profile, methods=methods, seeds=(0, 1), store=store)
    trained = store.trained
    freezing = ablations.partial_freezing(encoder, train, validation, dev, profile, ks=(1, 2), seeds=(0, 1), store=store)
    assert freezing.rows["nothing frozen"] == [r.labelled("nothing frozen") for r in made.chosen["full fine-tuning"]]
    assert freezing.rows["LoRA r=8"] == made.chosen["LoRA r=8"] and freezing.rows["k=2"][0].spec.method == frontier.FROZEN
    assert store.trained - trained == len(freezing.choices["k=1"].tried) + 1  # only k=1 is new: its sweep, seed 1
    assert store.read >= 2 * 3  # 3b's three methods, two seeds, read back


# ----------------------------------------------------------------------------- the lessons' verdicts


def _record(method, accuracy, seed, label="", seconds=1.0, method_parameters=100, head=2, lr=1e-3, size=600):
    return RunRecord(RunSpec(method, lr=lr, seed=seed), size, {"dev": {"accuracy": accuracy},
                     "validation": {"accuracy": accuracy}}, method_parameters, head, 1000, 4 * method_parameters,
                     seconds, 100, 38, label=label)


def _frontier(**by_method):
    sizes = {"full fine-tuning": 1000, "LoRA r=8": 50, "prompt tuning": 20, frontier.FROZEN: 0}
    chosen = {name: [_record(name, a, s, seconds=10.0 if name == "full fine-tuning" else 7.0,
                             method_parameters=sizes[name]) for s, a in enumerate(values)]
              for name, values in by_method.items()}
    choices = {name: experiments.Choice(1e-3, group[0], tuple(group[:1]), False) for name, group in chosen.items()}
    return frontier.Frontier(choices, chosen, 1e-2)


def test_the_frontier_verdicts_tie_where_the_seeds_disagree_and_fail_where_they_do_not():
    clear = _frontier(**{"full fine-tuning": (0.90, 0.91, 0.89), "LoRA r=8": (0.89, 0.91, 0.88),
                         "prompt tuning": (0.60, 0.62, 0.61), frontier.FROZEN: (0.75, 0.74, 0.76)})
    lines = frontier.verdicts(clear)
    assert "tie with it: LoRA r=8" in lines[0] and "trail it: prompt tuning" in lines[0]
    assert lines[-1].endswith("agrees")
    assert frontier.pareto_front(clear) == [frontier.FROZEN, "LoRA r=8", "full fine-tuning"]
    planted = _frontier(**{"full fine-tuning": (0.60, 0.61, 0.62), "LoRA r=8": (0.89, 0.91, 0.88),
                           "prompt tuning": (0.90, 0.92, 0.91), frontier.FROZEN: (0.75, 0.74, 0.76)})
    assert frontier.verdicts(planted)[-1].endswith("DISAGREES")  # prompt tuning above full fine-tuning
    # full fine-tuning falls off the front: fewer parameters beat it; LoRA stays, as prompt tuning only ties it
    assert frontier.pareto_front(planted) == [frontier.FROZEN, "prompt tuning", "LoRA r=8"]
    tied = _frontier(**{"full fine-tuning": (0.90, 0.80, 0.85), "LoRA r=8": (0.85, 0.86, 0.84),
                        "prompt tuning": (0.80, 0.90, 0.84), frontier.FROZEN: (0.75, 0.74, 0.76)})
    assert "(a tie)" in frontier.verdicts(tied)[-1]


def _study(rows):
    from ftcourse import ablations

    return ablations.Study({label: [_record(method, a, s, label=label, seconds=seconds, method_parameters=p,
                                            size=int(label.split(", ")[1]) if ", " in label else 600)
                                    for s, a in enumerate(values)]
                            for label, (method, values, seconds, p) in rows.items()})


def test_the_ablation_verdicts_read_paired_differences_and_can_fail():
    from ftcourse import ablations

    freezing = _study({"nothing frozen": ("full fine-tuning", (0.80, 0.82, 0.81), 10, 1000),
                       "k=0": ("k=0", (0.80, 0.83, 0.80), 9, 900), "k=3": ("k=3", (0.70, 0.71, 0.72), 6, 500),
                       "k=6": (frontier.FROZEN, (0.60, 0.61, 0.59), 3, 0)})
    tactic = _study({"neither": ("full fine-tuning", (0.60, 0.61, 0.59), 1, 1000),
                     "warmup only": ("full fine-tuning", (0.75, 0.77, 0.74), 1, 1000),
                     "layer decay only": ("full fine-tuning", (0.62, 0.58, 0.60), 1, 1000)})
    pre = _study({"pretrained, 64": ("full fine-tuning", (0.70, 0.72, 0.71), 1, 1000),
                  "random init, 64": ("random init", (0.50, 0.51, 0.50), 1, 1000)})
    lines = ablations.verdicts(freezing, tactic, pre, majority=0.51)
    assert lines[0].endswith("agrees") and "agrees" in lines[1]
    assert "k=0 " in lines[2] and "tie" in lines[2] and "k=3 -10.0" in lines[2] and "trails" in lines[2]
    assert "deepest k not shown worse, k=0" in lines[2]
    assert "warmup only +15.3" in lines[3] and "beats" in lines[3] and "layer decay only +0.0" in lines[3]
    assert "Shown to help: warmup only" in lines[3]
    assert lines[-1].endswith("agrees") and "majority class's 0.510" in lines[-1]
    flat = _study({"pretrained, 64": ("full fine-tuning", (0.52, 0.49, 0.51), 1, 1000),
                   "random init, 64": ("random init", (0.50, 0.51, 0.50), 1, 1000)})
    assert ablations.verdicts(freezing, tactic, flat)[-1].endswith("(a tie)")
    worse = _study({"pretrained, 64": ("full fine-tuning", (0.40, 0.41, 0.42), 1, 1000),
                    "random init, 64": ("random init", (0.50, 0.51, 0.50), 1, 1000)})
    assert ablations.verdicts(freezing, tactic, worse)[-1].endswith("DISAGREES")
    slower = _study({**{k: (v[0].method, tuple(r.accuracy for r in v), v[0].seconds_per_epoch, v[0].method_parameters)
                        for k, v in freezing.rows.items() if k != "k=6"},
                     "k=6": (frontier.FROZEN, (0.60, 0.61, 0.59), 12, 0)})
    assert "DISAGREES" in ablations.verdicts(slower, tactic, pre)[1]
    no_help = _study({"neither": ("full fine-tuning", (0.60, 0.61, 0.59), 1, 1000),
                      "warmup only": ("full fine-tuning", (0.62, 0.58, 0.60), 1, 1000)})
    assert "None is shown to help" in ablations.verdicts(freezing, no_help, pre)[3]


def test_the_grid_search_extends_past_the_edge_its_best_sits_on_and_stops_inside():
    from ftcourse.experiments import grid

    tried = []

    def rising(value):  # the best is always the largest: the grid grows upward, twice, then says so
        tried.append(value)
        return value

    found = grid.search(rising, [1.0, 2.0], step=4.0, extensions=2)
    assert tried == [1.0, 2.0, 8.0, 32.0] and found.best == 32.0 and found.at_edge
    peaked = grid.search(lambda v: -abs(v - 2.0), [0.5, 2.0, 8.0])  # an interior best: nothing added
    assert peaked.grid == [0.5, 2.0, 8.0] and peaked.best == 2.0 and not peaked.at_edge
    falling = grid.search(lambda v: -v, [1.0, 2.0], step=2.0, extensions=1)
    assert falling.grid == [0.5, 1.0, 2.0] and falling.best == 0.5 and falling.at_edge
    assert grid.search(lambda v: 1.0, [3.0, 1.0]).best == 1.0  # a tie goes to the first tried (sorted grid)
    with pytest.raises(ValueError, match="grid is empty"):
        grid.search(rising, [])


def test_every_sweep_is_printed_one_way():
    from ftcourse.experiments import grid

    assert grid.line({4e-4: 0.812, 1e-4: 0.78}, 4e-4) == "0.0001 0.780, 0.0004 0.812 -> 0.0004"
    edge = grid.search(lambda value: value, [1.0, 2.0], extensions=1)  # the best stays at the top end
    assert edge.at_edge and edge.line("{:.1f}") == "1 1.0, 2 2.0, 8 8.0 -> 8 (still at the grid's end)"
    middle = grid.search(lambda value: -abs(value - 2), [1.0, 2.0, 4.0])
    assert middle.line("{:.0f}") == "1 -1, 2 -0, 4 -2 -> 2"
