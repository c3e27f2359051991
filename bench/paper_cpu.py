"""How long each lesson takes on this CPU with bert-base-uncased at the offline profile's sizes.

``python -m bench paper_cpu`` (or ``python -m bench.paper_cpu``) writes random stand-ins
for bert-base-uncased and SBERT-NLI-base into a temporary Hugging Face cache, under their
real ids (``tests/paper_cache.py``; compute time does not depend on the weights), then
executes every notebook in a fresh kernel, offline, with the ``laptop`` profile (the
offline profile's sizes) and bert-base in every role:

    FTCOURSE_PROFILE=laptop FTCOURSE_ENCODER=bert-base-uncased FTCOURSE_RAW_ENCODER=bert-base-uncased
    FTCOURSE_SENTENCE=sentence-transformers/bert-base-nli-mean-tokens

which is what the README tells an online student without a GPU to run for bert-base. It
prints each notebook's wall time and CPU time (its kernel's user + system) and a Markdown
table for the README. The committed notebooks are never written.

The full run takes hours on 2 cores: run it on a quiet machine. ``--profile paper-smoke``
(a few dozen examples) and ``--only 01`` prove the script works in a minute.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BERT_BASE_ROLES = {
    "FTCOURSE_ENCODER": "bert-base-uncased",
    "FTCOURSE_RAW_ENCODER": "bert-base-uncased",
    "FTCOURSE_SENTENCE": "sentence-transformers/bert-base-nli-mean-tokens",
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped kernels count once they exit
    return usage.ru_utime + usage.ru_stime


def measure(profile: str = "laptop", only: list[str] | None = None, timeout: int = 6 * 3600) -> list[dict]:
    """Execute the course's notebooks with bert-base at ``profile``'s sizes; one row each."""
    sys.path.insert(0, str(REPO / "tests"))
    import paper_cache

    from ftcourse import config

    from ftcourse.course import notebooks

    if config.data_dir() is None:
        raise SystemExit("FTCOURSE_DATA is not set: the notebooks would ask the hub for the benchmarks, and this "
                         "run is offline. Fix: FTCOURSE_DATA=../shared/datasets (make bench sets it).")
    paths = [p for p in notebooks.course_notebooks() if not only or any(key in p.name for key in only)]
    if not paths:
        raise SystemExit(f"No notebook matches {only}. Fix: --only with part of a name, e.g. 01 or exercise.")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftcourse-paper-cpu-") as folder:
        cache = paper_cache.build(Path(folder) / "hub")
        os.environ.update(paper_cache.environment(cache))
        os.environ.update(BERT_BASE_ROLES, FTCOURSE_PROFILE=profile, FTCOURSE_CACHE=str(Path(folder) / "ftcourse"))
        print(f"profile {profile} with bert-base-uncased in every role; threads: "
              f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, cores {os.cpu_count()}", flush=True)
        for path in paths:
            name = f"{path.parent.name}/{path.name}"
            student_copy = bool(notebooks.EXPECTED_TO_RAISE.search(path.name)) and path.parent.name == "notebooks"
            cpu, start = _children_cpu(), time.perf_counter()
            try:
                notebooks.execute(path, timeout=timeout, allow_errors=student_copy, cwd=path.parent)
                status = "ok (stops at the stubs)" if student_copy else "ok"
            except Exception as error:  # report and go on: one lesson must not hide the others
                status = f"FAILED: {type(error).__name__}: {str(error).strip().splitlines()[-1][:200] if str(error).strip() else ''}"
            row = {"notebook": name, "seconds": time.perf_counter() - start, "cpu_seconds": _children_cpu() - cpu,
                   "status": status}
            rows.append(row)
            print(f"{name:<42} {row['seconds'] / 60:6.1f} min wall {row['cpu_seconds'] / 60:6.1f} min CPU  {status}",
                  flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| notebook | wall time | CPU time | |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r['notebook']}` | {r['seconds'] / 60:.1f} min | {r['cpu_seconds'] / 60:.1f} min | {r['status']} |"
              for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench paper_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="laptop",
                        help="whose sizes: laptop (the offline profile's, default) or paper-smoke (a quick check)")
    parser.add_argument("--only", nargs="*", default=None, help="notebooks whose names contain these, e.g. 01 03")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    from .common import machine

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"machine: {machine()}", flush=True)
    rows = measure(args.profile, args.only)
    print(f"\nMeasured {started} with `python -m bench paper_cpu --profile {args.profile}` on: {machine()}\n")
    print(markdown(rows))
    return 1 if any(r["status"].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
