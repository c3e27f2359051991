"""Inside the grading sandbox: execute one notebook in a fresh kernel and report, per cell, what it raised.

``python -m ftcourse.course.kernelrun`` reads a job (JSON) on stdin: the notebook, the time limit,
the output cap and a token. It runs every code cell even after an error, and writes one
line to stdout: ``FTCOURSE-RESULT <token> <json>``. The grader (``ftcourse.course.grading``)
starts it inside ``ftcourse.course.sandbox`` and never runs a submission's code itself.

The kernel gets neither this process's stdout nor its stderr (they go to /dev/null), and
this process makes itself non-dumpable, so code in the kernel cannot write a forged result
line: the token and the result channel stay out of its reach. Output the kernel sends to
the notebook (prints, displays) counts against the cap; past it, the kernel is killed and
the run reports ``output flood`` instead of letting the outputs grow in memory.

A job may carry a ``verdict_secret``: the checks kernel's guard stamps it on the grader's own
tamper verdicts (see ``ftcourse.course.grading.GUARD_CELL``), so that an exception of the same
name raised by a submission is not taken for one. It reaches the kernel in a private file,
never in the notebook's source (which the kernel's history would keep).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

RESULT_MARK = "FTCOURSE-RESULT"
PR_SET_DUMPABLE = 4


def _non_dumpable() -> None:
    """Deny same-uid processes (the kernel) ptrace and /proc/<pid>/fd access to this one."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to harden, the sandbox still applies
        pass


def _hand_over(secret: str) -> None:
    """Give the checks kernel the secret its guard stamps on the grader's verdicts: in a file only
    this uid may read, named by ``FTCOURSE_VERDICT_FILE`` in the kernel's environment; the
    grader's first cell reads it and deletes it before any of the submission's code runs."""
    fd, path = tempfile.mkstemp(prefix="ftcourse-verdict-", dir=os.getcwd())
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secret)
    os.environ["FTCOURSE_VERDICT_FILE"] = path


def _error_of(outputs) -> tuple[str, str] | None:
    for output in outputs:
        if output.get("output_type") == "error":
            return output.get("ename", "Error"), str(output.get("evalue", ""))[:1000]
    return None


def execute(nb, timeout: float, output_bytes: int) -> dict:
    """Run ``nb``'s code cells in order; returns ``{"status", "cells": [{index, error}], "stopped_at"}``."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    class CappedClient(NotebookClient):
        sent = 0
        flooded = False

        def output(self, outs, msg, display_id, cell_index):
            # Count what the kernel sends before nbclient keeps it; past the cap, keep nothing more and
            # kill the kernel (raising here would only end nbclient's output task, not the cell).
            self.sent += len(json.dumps(msg.get("content", {}), default=str))
            if self.sent > output_bytes:
                if not self.flooded:
                    self.flooded = True
                    os.kill(self.km.provisioner.process.pid, signal.SIGKILL)
                return None
            return super().output(outs, msg, display_id, cell_index)

    client = CappedClient(nb, timeout=int(timeout), kernel_name="python3", allow_errors=True,
                          resources={"metadata": {"path": "."}})
    report = {"status": "ok", "cells": [], "stopped_at": None, "message": ""}
    deadline = time.monotonic() + timeout
    current = None
    try:
        with client.setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                current = index
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CellTimeoutError("time limit")
                client.timeout = max(1, int(remaining))
                client.execute_cell(cell, index)
                error = _error_of(cell.outputs)
                report["cells"].append({"index": index, "error": list(error) if error else None})
                cell.outputs = []  # the grader needs the errors, not the outputs: keep memory flat
            current = None
    except CellTimeoutError:
        report.update(status="timeout", message=f"no result within the limit of {timeout:.0f} s")
    except (DeadKernelError, RuntimeError) as error:  # RuntimeError: a kernel that died before replying
        report.update(status="kernel died", message=str(error)[:300])
    if client.flooded:
        report.update(status="output flood", message=f"more than {output_bytes:,} bytes of output: the kernel "
                                                     "was stopped")
    report["stopped_at"] = current
    return report


def main() -> int:
    _non_dumpable()
    import nbformat

    job = json.loads(sys.stdin.read())
    nb = nbformat.reads(job["notebook"], as_version=4)
    if job.get("verdict_secret"):
        _hand_over(job["verdict_secret"])
    report = execute(nb, float(job["timeout"]), int(job["output_bytes"]))
    sys.stdout.write(f"\n{RESULT_MARK} {job['token']} {json.dumps(report)}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
