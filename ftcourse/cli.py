"""The ``ftcourse`` command (also ``python -m ftcourse``).

``ftcourse grade SUBMISSION.ipynb [...]`` runs each submitted exercise notebook in a fresh
kernel (on a temporary copy; the submissions are never modified), runs the exercise's
checks, visible and hidden, prints a pass/fail table per exercise part and writes a JSON
report. Exit status: 0 when every submission passes every part, 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _grade(args) -> int:
    from . import grading

    if args.timeout <= 0:
        print("error: --timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    missing = [p for p in args.submissions if not p.is_file()]
    if missing:
        print(f"error: no such file: {', '.join(str(p) for p in missing)}", file=sys.stderr)
        return 2
    try:
        exercises = {p: grading.find_exercise(p, args.exercise) for p in args.submissions}
    except grading.GradingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.profile:
        from .config import ConfigError, get_profile

        try:
            get_profile(args.profile)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    env = {"FTCOURSE_PROFILE": args.profile} if args.profile else {}
    results = []
    for path, exercise in exercises.items():
        print(f"grading {path.name} ({exercise.name}) ...", flush=True)
        results.append(grading.grade(path, exercise, timeout=args.timeout, env=env))
    print()
    print(grading.table(results))
    print()
    for result in results:
        print(grading.details(result))
    report = grading.write_report(results, args.report)
    print(f"\nreport: {report}")
    return 0 if all(r.status == "ok" and all(r.parts().values()) for r in results) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ftcourse", description="The course's command line.")
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser("grade", help="run and check submitted exercise notebooks",
                           description=__doc__.split("\n\n")[1].replace("\n", " ").replace("``", ""))
    grade.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION.ipynb")
    grade.add_argument("--exercise", help="which exercise (default: from the file name)")
    grade.add_argument("--timeout", type=float, default=900, help="seconds per notebook (default 900)")
    grade.add_argument("--profile", help="profile for the kernels, e.g. smoke for a quick run "
                                          "(default: FTCOURSE_PROFILE, else offline)")
    grade.add_argument("--report", type=Path, default=Path("grading-report.json"),
                       help="where to write the JSON report (default grading-report.json)")
    args = parser.parse_args(argv)
    if args.command == "grade":
        return _grade(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
