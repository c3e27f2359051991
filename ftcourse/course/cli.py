"""The ``ftcourse`` command (also ``python -m ftcourse``).

``ftcourse grade SUBMISSION.ipynb [...]`` or ``ftcourse grade submissions/`` grades exercise
notebooks: each runs in a bubblewrap sandbox (read-only course, private home, no network,
an unprivileged user, limits on memory, processes, CPU time and output; where the machine
has cgroups, a cap on each whole sandbox's memory and processes, else a warning), then the checks,
visible and hidden, run in a kernel built from the course's own cells and only the
submission's definitions. It prints a PASS / FAIL / REVIEW table per exercise part. Files:
a JSON report. A folder: every notebook under it, in parallel, into a gradebook (CSV and
JSON, one row per student, written as each finishes); a re-run skips notebooks already graded
with the same hash by the same grader version. Links, FIFOs, devices and oversized files are
refused unread, each in its row.
Exit status: 0 when every submission passes every part, 1 otherwise, 2 on bad usage or when the grader
cannot grade here (no sandbox; the data or models its verdicts need cannot be had).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _grade(args) -> int:
    from . import grading, sandbox

    if args.timeout <= 0:
        print("error: --timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print("error: --workers must be 1 or more", file=sys.stderr)
        return 2
    # A link (even a dangling one), a FIFO or a device exists: the grader refuses it in its row, unread.
    missing = [p for p in args.submissions if not os.path.lexists(p)]
    if missing:
        print(f"error: no such file or folder: {', '.join(str(p) for p in missing)}", file=sys.stderr)
        return 2
    folders = [p for p in args.submissions if p.is_dir()]
    if folders and len(args.submissions) > 1:
        print("error: give one folder, or notebook files, not both", file=sys.stderr)
        return 2
    try:
        exercise = grading.find_exercise(Path(), args.exercise) if args.exercise else None
        exercises = {p: exercise or grading.find_exercise(p) for p in args.submissions if p not in folders}
    except grading.GradingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.profile:
        from ..config import ConfigError, get_profile

        try:
            get_profile(args.profile)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    env = {"FTCOURSE_PROFILE": args.profile or GRADING_PROFILE}
    # Before anything runs: what the verdicts need here (the dev set, the encoder), or an error naming the fix
    # within seconds (a folder's exercises are known once its notebooks are listed: grade_folder checks them).
    try:
        grading.ready(exercises.values(), env)
    except grading.GradingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.no_sandbox:
        print("warning: --no-sandbox: submissions run with your account's rights, network and files",
              file=sys.stderr)
    else:
        try:
            sandbox.require()
            sandbox.check_works()
        except sandbox.SandboxUnavailable as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    # Once: whether each whole sandbox gets a cgroup (memory.max, pids.max) here, and what is missing if not.
    warning = sandbox.cgroup_warning()
    if warning:
        print(warning, file=sys.stderr)
    sandboxed = not args.no_sandbox
    if folders:
        try:
            results = grading.grade_folder(folders[0], args.gradebook, exercise, workers=args.workers,
                                           force=args.force, timeout=args.timeout, env=env, use_sandbox=sandboxed)
        except grading.GradingError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    else:
        results = []
        for path, chosen in exercises.items():
            print(f"grading {grading.clean(path.name, 120)} ({chosen.name}) ...", flush=True)
            results.append(grading.grade(path, chosen, timeout=args.timeout, env=env, use_sandbox=sandboxed))
    print()
    print(grading.table(results))
    print()
    for result in results:
        print(grading.details(result))
    if folders:
        print(f"\ngradebook: {args.gradebook.with_suffix('.csv')}, {args.gradebook.with_suffix('.json')}; "
              f"answers to read: {grading.review_folder(args.gradebook) / 'index.html'}")
    else:
        print(f"\nreport: {grading.write_report(results, args.report)}")
    return 0 if all(r.status == "ok" and all(r.parts().values()) for r in results) else 1


#: The profile a class is graded under unless --profile says otherwise (see ftcourse.config).
GRADING_PROFILE = "grading"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ftcourse", description="The course's command line.")
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser("grade", help="run and check submitted exercise notebooks",
                           description=__doc__.split("\n\n")[1].replace("\n", " ").replace("``", ""))
    grade.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION.ipynb|FOLDER")
    grade.add_argument("--exercise", help="which exercise (default: from the file name)")
    grade.add_argument("--timeout", type=float, default=900, help="seconds per notebook (default 900)")
    grade.add_argument("--profile", help=f"profile for the kernels (default {GRADING_PROFILE}: the exercise "
                                          "sized to grade a class; offline: the students' sizes; smoke: seconds)")
    grade.add_argument("--report", type=Path, default=Path("grading-report.json"),
                       help="notebook files: where to write the JSON report (default grading-report.json)")
    grade.add_argument("--gradebook", type=Path, default=Path("gradebook"),
                       help="a folder: the gradebook's path without extension (default gradebook: "
                            "gradebook.csv and gradebook.json)")
    grade.add_argument("--workers", type=int, help="gradings at once (default: what the cores and memory allow)")
    grade.add_argument("--force", action="store_true", help="regrade submissions already in the gradebook")
    grade.add_argument("--no-sandbox", action="store_true",
                       help="run submissions without bubblewrap, with your own rights (only for trusted notebooks)")
    args = parser.parse_args(argv)
    if args.command == "grade":
        return _grade(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
