"""Grading at class scale: seconds per submission, a class's wall time, and the peak memory of it all.

Grades a small class made from the exercise (the solution, the untouched student copy, and broken
variants of the solution: an untrained model, a model scored on the training set, a frozen encoder
that moved) with ``grading.grade_folder``, sandboxed, under a profile (``grading`` by default:
``ftcourse grade``'s), and samples the resident memory of this process and every sandbox four
times a second. It then checks that the grading told them apart: the solution passes every part,
each broken variant fails the part it broke, and the untouched copy passes nothing.

``python -m bench grading`` (2 workers, the grading profile), or ``python -m bench.grading [--workers 2]
[--profile grading] [--copies 1]``: ``--copies`` grades each notebook that many times (as different
students), for a bigger class.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from . import common
from .common import Row
from .course import tree_rss

TARGET_SUBMISSION_SECONDS = 3 * 60  # issue 25: one submission on one core
TARGET_CLASS_SECONDS = 60 * 60  # a class of 30 on 2 cores
CLASS = 30
NAME = "05_exercise_bert_base.ipynb"


def broken_variants() -> dict:
    """Student -> (notebook, the part it must fail, or None when it must pass everything / nothing)."""
    import nbformat

    from ftcourse.course import exercise

    solution = exercise.SOLUTIONS_DIR / NAME
    read = lambda: nbformat.read(solution, as_version=4)  # noqa: E731

    def edit(old: str, new: str):
        nb = read()
        cell = next(c for c in nb.cells if c.cell_type == "code" and "def run_regime(" in c.source)
        assert old in cell.source, old
        cell.source = cell.source.replace(old, new)
        return nb

    return {
        "solution": (read(), "all"),
        "untouched": (nbformat.read(exercise.student_path(solution), as_version=4), "none"),
        "untrained": (_untrained(read()), "4 measure"),
        "scored_on_train": (edit("predict(model, dev_set,", "predict(model, train_set,"), "4 measure"),
        "frozen_moved": (edit("    with peak_memory() as peak:\n",
                              "    set_regime(model, 'finetune') if regime == 'frozen' else None\n"
                              "    with peak_memory() as peak:\n"), "4 measure"),
    }


UNTRAINED = """\
def run_regime(regime, seed=0, **changes):
    model = build_model(regime, seed)  # scored as built: never trained
    logits, labels = predict(model, dev_set, pad_token_id=tokenizer.pad_token_id)
    return {"regime": regime, "seed": seed, "accuracy": accuracy(logits, labels)["accuracy"], "seconds_per_epoch": 1.0,
            "trainable": count_parameters(model)["trainable"], "peak_mib": 1.0}"""


def _untrained(nb):
    cell = next(c for c in nb.cells if c.cell_type == "code" and "def run_regime(" in c.source)
    cell.source = UNTRAINED
    return nb


def main(argv=None) -> list[Row]:
    import nbformat
    import psutil

    from ftcourse.course import grading

    parser = argparse.ArgumentParser(prog="python -m bench grading")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--profile", default="grading")
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    print(f"\n== grading a class: profile {args.profile}, {args.workers} workers on {cores} cores, "
          f"load {os.getloadavg()[0]:.1f} ==")
    variants = broken_variants()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "class"
        expected = {}
        for copy in range(args.copies):
            for name, (nb, must) in variants.items():
                student = f"{name}-{copy}" if args.copies > 1 else name
                (folder / student).mkdir(parents=True)
                nbformat.write(nb, folder / student / NAME)
                expected[student] = must
        me, peak = psutil.Process(), [0]
        done = threading.Event()

        def sample():
            while not done.wait(0.25):
                peak[0] = max(peak[0], tree_rss(me))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.perf_counter()
        env = {"FTCOURSE_PROFILE": args.profile}
        if common.UNPINNED_ENCODER:  # the sandbox's /tmp is its own: it cannot see the pinned copy
            env["FTCOURSE_ENCODER"] = common.UNPINNED_ENCODER
        results = grading.grade_folder(folder, Path(scratch) / "gradebook", workers=args.workers,
                                       timeout=args.timeout, env=env, progress=False)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
    told_apart = True
    for result in results:
        marks, must = result.marks(), expected[result.student]
        ok = (set(marks.values()) == {"PASS"} if must == "all" else
              "PASS" not in marks.values() if must == "none" else marks.get(must) == "FAIL")
        told_apart &= ok
        print(f"  {result.student:<20} {result.seconds:6.0f} s  {result.status:<8} {marks}"
              f"{'' if ok else '  <- NOT TOLD APART'}")
        if result.status not in ("ok", grading.REVIEW):  # say why, so a broken run is not read as a verdict
            print(f"    {result.status}: {result.failing_cell or (result.cell_errors or result.notes or [''])[0]}")
    seconds = [r.seconds for r in results]
    per = sum(seconds) / len(seconds)
    # Each worker is one sandbox at a time: a class's wall time is its submissions' total / workers.
    projected = wall / len(results) * CLASS
    print(f"per submission: mean {per:.0f} s, slowest {max(seconds):.0f} s (with {args.workers} at once on {cores} "
          f"cores); this class of {len(results)}: {wall / 60:.1f} min; a class of {CLASS} at this rate: "
          f"{projected / 60:.0f} min; peak memory of the grader and its sandboxes: {peak[0] / 2**30:.2f} GiB")
    return [
        Row("grading: one submission", f"{per:.0f} s", "<= 180 s on one core", per <= TARGET_SUBMISSION_SECONDS,
            f"mean of {len(results)}, {args.workers} at once on {cores} cores, profile {args.profile}"),
        Row(f"grading: a class of {CLASS}", f"{projected / 60:.0f} min", "<= 60 min on 2 cores",
            projected <= TARGET_CLASS_SECONDS, f"from {len(results)} graded in {wall / 60:.1f} min"),
        Row("grading: peak memory", f"{peak[0] / 2**30:.2f} GiB", "", None, f"{args.workers} workers, process tree RSS"),
        Row("grading: solution and broken variants told apart", "yes" if told_apart else "NO", "yes", told_apart, ""),
    ]


if __name__ == "__main__":
    from .common import quiet

    quiet()
    main()
