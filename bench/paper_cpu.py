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

``--estimate`` takes minutes instead: it measures, in one process and one thread, a training
step and a forward pass of bert-base (``BertConfig()``, random weights: the compute does not
depend on them) against the same of each offline encoder, and scales each notebook's measured
offline time (``data/notebook_timings.json``, one thread, from the last measured build) by the
ratio of the encoder that dominates it. An extrapolation, and an upper bound: the parts of a
lesson that do not run the encoder (heads on cached features, data loading) do not grow.
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


#: The encoder whose compute dominates each notebook in the offline profile (bench/README.md).
DOMINANT_ENCODER = {"notebooks/01_composition": "encoder", "notebooks/02_feature_readout": "encoder",
                    "notebooks/03_costs_and_lora": "encoder", "notebooks/03b_peft_frontier": "encoder",
                    "notebooks/03c_between_the_extremes": "encoder", "notebooks/04_cls_vs_sbert": "raw_encoder",
                    "notebooks/04b_span_and_pair_heads": "encoder",
                    "notebooks/05_exercise_bert_base": None, "solutions/05_exercise_bert_base": "encoder"}


def _step_seconds(model, batch: int = 16, tokens: int = 48, steps: int = 3, train: bool = True) -> float:
    import torch

    ids = torch.randint(1000, 20000, (batch, tokens))
    mask = torch.ones_like(ids)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    best = float("inf")
    for _ in range(steps + 1):  # the first is a warm-up
        start = time.perf_counter()
        if train:
            model(input_ids=ids, attention_mask=mask).last_hidden_state.float().pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            with torch.inference_mode():
                model(input_ids=ids, attention_mask=mask)
        best = min(best, time.perf_counter() - start)
    return best


def estimate() -> list[dict]:
    """Each notebook's time with bert-base at the offline sizes, extrapolated (see the module doc)."""
    import json

    import torch
    from transformers import BertConfig, BertModel

    from ftcourse import config, models

    torch.set_num_threads(1)  # as make course runs each kernel
    offline = config.get_profile("offline")
    bert_base = BertModel(BertConfig(), add_pooling_layer=False)
    ratios = {}
    for role in ("encoder", "raw_encoder"):
        small = models.load_encoder(offline, role=role, add_pooling_layer=False)
        ratios[role] = {kind: _step_seconds(bert_base, train=train) / _step_seconds(small, train=train)
                        for kind, train in (("train", True), ("forward", False))}
        print(f"bert-base / offline {role} ({models.describe(offline)[role]}): training step "
              f"{ratios[role]['train']:.1f}x, forward {ratios[role]['forward']:.1f}x", flush=True)
    timings = json.loads((REPO / "data" / "notebook_timings.json").read_text())
    rows = []
    for key, role in DOMINANT_ENCODER.items():
        seconds = timings.get(key, {}).get("seconds")
        if seconds is None:
            continue
        factor = ratios[role]["train"] if role else 1.0
        rows.append({"notebook": f"{key}.ipynb", "seconds": seconds * factor, "offline_seconds": seconds,
                     "factor": factor, "role": role})
    return rows


def estimate_markdown(rows: list[dict]) -> str:
    lines = ["| notebook | bert-base, 1 thread | how | offline profile, 1 thread |", "| --- | --- | --- | --- |"]
    for r in rows:
        how = (f"extrapolated: offline time x {r['factor']:.1f} (bert-base / offline {r['role']} training step)"
               if r["role"] else "the stubs stop at the first exercise: no training")
        lines.append(f"| `{r['notebook']}` | {r['seconds'] / 60:.0f} min | {how} | {r['offline_seconds'] / 60:.1f} min |")
    return "\n".join(lines)


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
    parser.add_argument("--estimate", action="store_true",
                        help="minutes, not hours: extrapolate from measured steps (see the module doc)")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    from .common import machine

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"machine: {machine()}", flush=True)
    if args.estimate:
        from .common import quiet

        quiet()
        rows = estimate()
        print(f"\nEstimated {started} with `python -m bench paper_cpu --estimate` on: {machine()}\n")
        print(estimate_markdown(rows))
        return 0
    rows = measure(args.profile, args.only)
    print(f"\nMeasured {started} with `python -m bench paper_cpu --profile {args.profile}` on: {machine()}\n")
    print(markdown(rows))
    return 1 if any(r["status"].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
