"""``python -m bench [names...]``: run the benchmarks and print one table.

Names: loop, throughput, precision, levers, readout, grading, course (default: all), and paper_cpu (only by name: each
lesson with bert-base at the offline profile's sizes, hours on a CPU; its own options follow
it, see ``python -m bench paper_cpu --help``). ``--update-readme`` writes the table, with the
machine it came from, into bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

from . import common

NAMES = ("loop", "throughput", "precision", "levers", "readout", "grading", "course")
ON_REQUEST = ("paper_cpu",)  # never part of "all": it takes hours on a CPU
README = Path(__file__).with_name("README.md")
READOUT_SPEED = Path(__file__).with_name("readout_speed.py")


def table(rows: list[common.Row]) -> str:
    mark = {True: "met", False: "**missed**", None: ""}
    lines = ["| benchmark | measured | target | | detail |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r.benchmark} | {r.figure} | {r.target} | {mark[r.met]} | {r.note} |" for r in rows]
    return "\n".join(lines)


def update_readme(text: str) -> None:
    begin, end = "<!-- bench table: begin -->", "<!-- bench table: end -->"
    readme = README.read_text(encoding="utf-8")
    if begin not in readme:
        raise SystemExit(f"{README} has no {begin} ... {end} markers to put the table between.")
    readme = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{text}\n{end}", readme, flags=re.S)
    README.write_text(readme, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=[], metavar="NAME",
                        help=f"benchmarks to run, from {', '.join(NAMES)} (default: all)")
    parser.add_argument("--skip-course", action="store_true", help="leave out the (slow) whole-course run")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats of the loop benchmark (fastest kept)")
    parser.add_argument("--train-size", type=int, default=1000, help="SST-2 training sentences (loop, readout)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs of the loop benchmark")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for the in-process benchmarks (default: torch's choice); on a "
                             "machine shared with other jobs, 1 avoids threads waiting on each other")
    parser.add_argument("--update-readme", action="store_true", help="write the table into bench/README.md")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="course: build into DIR and keep the executed notebooks and site (default: a temporary folder)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["paper_cpu"]:  # its own command line (python -m bench paper_cpu --help)
        from . import paper_cpu

        return paper_cpu.main(argv[1:])
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress shows up even when piped to a file
    unknown = [n for n in args.names if n not in NAMES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(NAMES + ON_REQUEST)}"
                     + ("; paper_cpu runs alone: python -m bench paper_cpu" if "paper_cpu" in unknown else ""))
    names = [n for n in (args.names or NAMES) if not (n == "course" and args.skip_course)]

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    common.quiet()
    course_env = dict(os.environ)  # the course runs as users run it, not with the pinned copy
    encoder = common.pin_encoder()
    machine = common.machine()
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"machine: {machine}\nencoder: {encoder}\n")
    rows, shared = [], {}
    if "loop" in names:
        from . import loop_vs_trainer

        found, shared = loop_vs_trainer.main(train_size=args.train_size, epochs=args.epochs, repeats=args.repeats)
        rows += found
    if "throughput" in names:
        from . import throughput

        rows += throughput.main()
    if "precision" in names:
        from . import precision

        rows += precision.main(train_size=args.train_size)
    if "levers" in names:
        from . import levers

        rows += levers.main(train_size=args.train_size)
    if "readout" in names:
        from . import frozen_vs_finetune

        rows += frozen_vs_finetune.main(shared, train_size=args.train_size)
        if READOUT_SPEED.is_file():  # lesson 2's own measurement, by its author
            print(f"\n== {READOUT_SPEED.name} ==", flush=True)
            threads = ["--threads", str(args.threads)] if args.threads else []
            subprocess.run([sys.executable, "-m", f"bench.{READOUT_SPEED.stem}", *threads], check=False)
    if "grading" in names:
        from . import grading

        rows += grading.main([])
    if "course" in names:
        from . import course

        rows += course.main(env=course_env, keep=args.keep)
    minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60
    text = (f"Measured {started:%Y-%m-%d %H:%M} UTC in {minutes:.0f} min on: {machine}\n\n"
            f"Encoder: {encoder}\n\n{table(rows)}")
    print("\n" + text)
    if args.update_readme:
        update_readme(text)
        print(f"\nwritten to {README.relative_to(README.parents[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
