"""The bert-base exercise (``solutions/05_exercise_bert_base.ipynb``), declared for the grading engine:
its parts, the records the evidence kernel makes, the verdicts computed from them
(``ftcourse.course.verdicts``), the course helpers that would solve a part, and the code the review
page shows. ``ftcourse.course.grading`` finds it as ``EXERCISE`` and knows none of these names."""

from __future__ import annotations

from pathlib import Path

from .grading import EVIDENCE, Check, Exercise, Part, Record, student_raised
from .withheld import ABSENT, CONSTANTS

REGIMES = ("frozen", "finetune", "lora")
LOOP_REGIMES = ("frozen", "finetune")  # the regimes the student's own loop trains
#: The lists the grader asks ``summarize`` about (its own arithmetic is the answer).
SUMMARY_EXAMPLES = ([0.80, 0.84, 0.78, 0.90], [0.5, 0.5], [0.71, 0.64, 0.69])


def bert_base_records(profile) -> tuple:
    others = [seed for seed in profile.stability_seeds if seed != 0]
    return (
        Record("1 lora", f"{EVIDENCE}.record_lora(add_lora)"),
        Record("2 regimes", f"{EVIDENCE}.record_regimes(build_model, {REGIMES!r})"),
        Record("3 loop", f"{EVIDENCE}.record_loop(globals(), {LOOP_REGIMES!r})"),
        Record("4 measure", f"{EVIDENCE}.record_runs(globals(), {REGIMES!r}, (0,), 'results.json')"),
        Record("5 seeds", f"{EVIDENCE}.record_summary(summarize, {SUMMARY_EXAMPLES!r})"),
        Record("5 seeds", f"{EVIDENCE}.record_runs(globals(), {REGIMES!r}, {tuple(others)!r}, 'stability.json')"),
    )


def sandbox_data(profile, folder: Path) -> None:
    """What the sandbox's ``FTCOURSE_DATA`` holds: SST-2 with only the grader's ``train`` and ``dev`` rows
    (``grader_split``), in the order the exercise's loader reads them; never the held-out sentences."""
    from .verdicts import grader_split

    train, dev, _ = grader_split(profile)
    (Path(folder) / "sst2").mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("validation", dev)):
        lines = ["sentence\tlabel"]
        for sentence, label in zip(rows["sentence"], rows["label"]):
            if "\t" in sentence or "\n" in sentence:
                raise ValueError(f"An SST-2 sentence holds a tab or a newline: {sentence!r}")
            lines.append(f"{sentence}\t{label}")
        (Path(folder) / "sst2" / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def prepare_bert_base(profile) -> None:
    """The reference the bert-base verdicts rebuild every model from (``verdicts.prepare``): its dev set
    and pretrained encoder, or ``verdicts.ReferenceUnavailable`` naming what is missing and the fix."""
    from . import verdicts

    verdicts.prepare(profile)


def judge_bert_base(folder: Path, profile) -> list:
    """The bert-base exercise's verdicts, each recomputed by ``ftcourse.course.verdicts``."""
    from . import verdicts
    from ..session import quiet_libraries

    quiet_libraries()
    found = []

    def check(part, hidden, verdict):
        try:
            found.append((part, True, verdict(), hidden))
        except verdicts.StudentRaised as error:
            found.append((part, False, student_raised(error), hidden))
        except verdicts.ForReview as undecided:
            found.append((part, None, str(undecided), hidden))  # None: for the instructor (REVIEW)
        except verdicts.EvidenceMissing as missing:
            found.append((part, False, str(missing), hidden))
        except Exception as error:  # malformed evidence: a failure, never a crash of the grader
            found.append((part, False, f"the evidence is malformed ({type(error).__name__}: {error})", hidden))

    def loaded(name):
        try:
            return verdicts.read_json(folder, name)
        except verdicts.EvidenceMissing as missing:
            return missing

    def given(value):
        if isinstance(value, Exception):
            raise value
        return value

    def pick(records, regime, seed=None):
        """The record of ``regime`` (and ``seed``) in a loaded file: a dict by regime, or a list of records."""
        records = given(records)
        if isinstance(records, dict):
            return records.get(regime)
        if not isinstance(records, list):
            return None
        return next((r for r in records if isinstance(r, dict) and r.get("regime") == regime
                     and (seed is None or r.get("seed") == seed)), None)

    def rescored(records, regime, seed):
        found = verdicts.run(pick(records, regime, seed), regime, seed, folder, verdicts.reference(profile))
        held = "" if found["held_out"] is None else f", {found['held_out']:.4f} on the grader's held-out sentences"
        return f"rescored {found['accuracy']:.4f} on dev{held}; {found['descent']}"

    lora, regimes, loop, results, stability, summary = (loaded(f"{n}.json") for n in (
        "lora", "regimes", "loop", "results", "stability", "summary"))
    check("1 lora", False, lambda: verdicts.lora_on_bert_base(given(lora)))
    for regime in REGIMES:
        check("2 regimes", False, lambda regime=regime: verdicts.regime_model(pick(regimes, regime), regime,
                                                                             verdicts.reference(profile)))
    for regime in LOOP_REGIMES:
        check("3 loop", True, lambda regime=regime: verdicts.loop(pick(loop, regime), regime, folder,
                                                                  verdicts.reference(profile)))
    for regime in REGIMES:
        check("4 measure", True, lambda regime=regime: rescored(results, regime, 0))
    check("5 seeds", False, lambda: verdicts.summary(given(summary), SUMMARY_EXAMPLES))
    for regime in REGIMES:
        for seed in (s for s in profile.stability_seeds if s != 0):
            check("5 seeds", True, lambda regime=regime, seed=seed: rescored(stability, regime, seed))
    return found


EXERCISE = Exercise(
    name="05_exercise_bert_base",
    title="bert-base: frozen, fine-tuned, LoRA r=8",
    parts=(
        Part("1 lora", ("add_lora",), ("check_lora_on_bert_base",)),
        Part("2 regimes", ("build_model",), ("check_frozen_regime", "check_finetune_regime", "check_lora_regime")),
        Part("3 loop", ("train_loop",), ("check_train_loop",)),
        Part("4 measure", ("run_regime", "results"), ("check_regime_result",)),
        Part("5 seeds", ("summarize", "stability"), ("check_seed_summary",)),
    ),
    records=bert_base_records,
    judge=judge_bert_base,
    prepare=prepare_bert_base,
    sandbox_data=sandbox_data,
    reviewed_code=("train_loop",),
    # The course's own LoRA, model builders and run engines: absent from the sandbox's package (the given
    # cells import data, derived, experiments' verdicts, models, published, report, heads and training).
    # regimes keeps its constants (the checks read REGIMES). training.train stays: run_regime uses it.
    withheld={"ftcourse.lora": ABSENT, "ftcourse.methods": ABSENT, "ftcourse.frontier": ABSENT,
              "ftcourse.ablations": ABSENT, "ftcourse.experiments.engine": ABSENT, "ftcourse.experiments.store": ABSENT,
              "ftcourse.experiments.choose": ABSENT, "ftcourse.regimes": CONSTANTS},
    solved_by_import={"1 lora": ("ftcourse.lora", "add_lora", None),
                      "3 loop": ("ftcourse.training", "train", "train_loop"),
                      "4 measure": ("ftcourse.regimes", "run_regime", None)},
    checks=(
        Check("1 lora", "add_lora's configuration, rebuilt on bert-base: 294,912 LoRA parameters, 0.27%", False),
        Check("2 regimes", "build_model(regime) is the course's model and trains what the regime trains", False),
        Check("3 loop", "the student's train_loop, run on the frozen and full regimes, trained every parameter the "
                        "regime trains and left every other one the pretrained one"),
        Check("4 measure", "each run trained (its trainable weights moved, its frozen ones are the pretrained), and "
                           "its accuracy and trainable count are the re-scored model's"),
        Check("5 seeds", "summarize's mean, sample std and range on the grader's examples", False),
        Check("5 seeds", "every stability run verified and re-scored as in part 4"),
    ),
)
