"""The whole course: wall time and peak memory of executing every notebook.

Runs ``python -m ftcourse.notebooks build`` (what ``make course`` runs) in a subprocess,
into a temporary folder, and samples the resident memory of its whole process tree (the
builder and every notebook's kernel) four times a second. The peak is the largest sum
seen: an upper bound on what the course needs at once (pages shared between processes
count twice), and a lower bound on spikes shorter than the sampling interval.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import Row

TARGET_SECONDS = 10 * 60
TARGET_BYTES = 6 * 2**30


def tree_rss(process) -> int:
    import psutil

    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def main(timeout: int = 3600, env: dict | None = None) -> list[Row]:
    import psutil

    from ftcourse.notebooks import course_notebooks

    notebooks = course_notebooks()
    print(f"\n== the whole course: executing all {len(notebooks)} notebooks ==")
    if not notebooks:
        print("no notebooks found under notebooks/ or solutions/: nothing to measure")
        return [Row("whole course: wall time", "untested", "< 10 min", None, "no notebooks yet")]
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "ftcourse.notebooks", "build", "--out", out],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)
        watched = psutil.Process(child.pid)
        peak = 0
        import threading

        lines = []

        def read():
            for line in child.stdout:
                lines.append(line)
                print("  " + line, end="", flush=True)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while child.poll() is None:
            peak = max(peak, tree_rss(watched))
            if time.perf_counter() - start > timeout:
                child.kill()
                break
            time.sleep(0.25)
        reader.join(timeout=5)
        seconds = time.perf_counter() - start
    failed = child.returncode != 0
    print(f"whole course: {seconds / 60:.1f} min (target < 10: {'met' if seconds < TARGET_SECONDS else 'missed'}), "
          f"peak memory {peak / 2**30:.2f} GiB (target < 6: {'met' if peak < TARGET_BYTES else 'missed'})"
          + ("; SOME NOTEBOOKS FAILED (see above)" if failed else ""))
    note = f"{len(notebooks)} notebooks" + ("; some failed" if failed else "")
    return [Row("whole course: wall time", f"{seconds / 60:.1f} min", "< 10 min", seconds < TARGET_SECONDS, note),
            Row("whole course: peak memory (process tree RSS)", f"{peak / 2**30:.2f} GiB", "< 6 GiB", peak < TARGET_BYTES, note)]
