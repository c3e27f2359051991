"""Run a submission's code in a bubblewrap sandbox, with limits, and capture its output safely.

The sandbox (``bwrap``, https://github.com/containers/bubblewrap, Debian package
``bubblewrap``) gives the command:

- a root file system with only the system (``/usr``, ``/etc``), the Python installation,
  the virtual environment, the course's package and data, and the benchmarks folder, all
  read-only: not the instructor's home, not the other submissions, not the repository;
- a private temporary ``/tmp`` (the home and working directory live there), size-capped;
- no network (a new network namespace with only loopback), its own PID, IPC and UTS namespaces;
- an unprivileged user: when the grader runs as root, bwrap sets up the sandbox and
  ``setpriv`` drops to a dedicated uid (one per concurrent run) with no capabilities;
  otherwise bwrap runs the command in a user namespace as the grader's own uid;
- resource limits set with ``prlimit`` inside the sandbox: address space (memory), number
  of processes and threads (``RLIMIT_NPROC``: counted per uid, hence the dedicated uid per
  run), CPU time, file size, no core dumps.

The grader reads the command's stdout through a pipe and keeps at most ``output_bytes``:
past that the whole sandbox is killed and ``SandboxRun.flooded`` says so, so a print flood
costs the grader a bounded buffer, not its memory. A wall-clock limit kills it the same way.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import REPO_ROOT

INSTALL_HINT = ("bubblewrap (bwrap) is not installed. Fix: `make system-packages` (runs apt-get install -y "
                "bubblewrap), or `sudo apt-get install bubblewrap`; to grade without a sandbox anyway, pass "
                "--no-sandbox (only for notebooks you trust).")
#: The first uid of the range the grader drops to when it runs as root; run k uses UID_BASE + k.
UID_BASE = int(os.environ.get("FTCOURSE_SANDBOX_UID_BASE", "61000"))
HOME = "/tmp/home"
GiB = 2**30
MiB = 2**20


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create a sandbox here; the message says how to fix it."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 6 * GiB  # RLIMIT_AS, per process: torch reserves address space beyond what it touches
    processes: int = 256  # RLIMIT_NPROC: processes and threads of the sandbox's uid
    cpu_seconds: int = 3600  # RLIMIT_CPU, per process
    file_bytes: int = 512 * MiB  # RLIMIT_FSIZE: the largest file it may write
    tmp_bytes: int = 1 * GiB  # size of its private /tmp (held in memory)
    output_bytes: int = 8 * MiB  # stdout kept by the grader; more is a flood


@dataclass
class SandboxRun:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    flooded: bool = False


def bwrap() -> str | None:
    return shutil.which("bwrap")


def require() -> str:
    path = bwrap()
    if not path:
        raise SandboxUnavailable(INSTALL_HINT)
    return path


def read_only_paths() -> list[Path]:
    """What the sandbox may read: the Python installation, the virtual environment, the course's
    package and data, and the benchmarks (``FTCOURSE_DATA``). Symlinks resolved, duplicates dropped."""
    paths = [Path(sys.base_prefix), Path(sys.prefix), REPO_ROOT / "ftcourse", REPO_ROOT / "data"]
    for name in ("FTCOURSE_DATA", "HF_HOME", "HF_HUB_CACHE"):
        if os.environ.get(name) and Path(os.environ[name]).is_dir():
            paths.append(Path(os.environ[name]))
    resolved = []
    for path in paths:
        for candidate in {path.absolute(), path.resolve()}:
            if candidate.exists() and not any(candidate.is_relative_to(p) for p in resolved):
                resolved = [p for p in resolved if not p.is_relative_to(candidate)] + [candidate]
    return sorted(resolved)


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():  # merged /usr: keep the link
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def command(argv: list[str], limits: Limits, env: dict, slot: int = 0) -> list[str]:
    """The full command line: bwrap, then (as root) setpriv, then prlimit, then ``argv``."""
    # The private /tmp comes first: bwrap mounts in order, so a course or venv under /tmp (a CI
    # clone, say) is bound on top of it afterwards instead of being hidden by it.
    args = [require(), *_system_binds(), "--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.tmp_bytes), "--perms", "01777", "--tmpfs", "/tmp"]
    made = {Path("/usr"), Path("/etc"), Path("/tmp")}
    for path in read_only_paths():
        # bwrap creates missing parents as 0700 (root's home would stay closed to the unprivileged user).
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in made and not parent.is_relative_to(Path("/usr")):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind", str(path), str(path)]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv"]
    for name, value in {"HOME": HOME, "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
                        **env}.items():
        args += ["--setenv", name, str(value)]
    if os.geteuid() == 0:
        # bwrap (root) mounts; setpriv then drops to an unprivileged uid of our own, keeping no capability.
        uid = str(UID_BASE + slot)
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                 "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--bounding-set", "-all",
                 "--inh-caps", "-all", "--no-new-privs"]
    else:
        args += ["--unshare-user", "--disable-userns", "--"]
    # Limits set inside the sandbox, after the user namespace exists, so they count its processes only.
    args += ["prlimit", f"--as={limits.memory_bytes}", f"--nproc={limits.processes}",
             f"--cpu={limits.cpu_seconds}", f"--fsize={limits.file_bytes}", "--core=0", "--",
             "sh", "-c", f"mkdir -p {HOME} && cd {HOME} && exec \"$@\"", "sandbox"]
    return args + list(argv)


def _kill(process: subprocess.Popen) -> None:
    """Kill the sandbox: bwrap's own init dies with it (--die-with-parent), and with it every
    process of the sandbox's PID namespace, forks included."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(argv: list[str], stdin: str, timeout: float, limits: Limits = Limits(), env: dict | None = None,
        slot: int = 0, sandbox: bool = True) -> SandboxRun:
    """Run ``argv`` (sandboxed unless ``sandbox=False``), feeding ``stdin``; never raises for what
    the command does. stdout beyond ``limits.output_bytes`` kills it (``flooded``)."""
    if sandbox:
        return _run(command(argv, limits, env or {}, slot), stdin, timeout, limits, None, None)
    # Unsandboxed (--no-sandbox): at least a throwaway working directory, not the grader's.
    with tempfile.TemporaryDirectory(prefix="ftcourse-unsandboxed-") as folder:
        return _run(list(argv), stdin, timeout, limits, {**os.environ, **(env or {})}, folder)


def _run(full: list[str], stdin: str, timeout: float, limits: Limits, child_env: dict | None,
         cwd: str | None) -> SandboxRun:
    start = time.monotonic()
    process = subprocess.Popen(full, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, env=child_env, cwd=cwd)
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    flooded = threading.Event()

    def drain(stream, name: str, cap: int) -> None:
        # Read in chunks and keep at most `cap` bytes: memory stays bounded whatever the child writes.
        while chunk := stream.read1(65536):
            room = cap - len(kept[name])
            if room > 0:
                kept[name] += chunk[:room]
            if len(chunk) > room:
                if name == "stdout":
                    flooded.set()
                    _kill(process)
    readers = [threading.Thread(target=drain, args=(process.stdout, "stdout", limits.output_bytes), daemon=True),
               threading.Thread(target=drain, args=(process.stderr, "stderr", 64 * 1024), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        process.stdin.write(stdin.encode())
        process.stdin.close()
    except BrokenPipeError:
        pass
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill(process)  # whatever is left in the session (nothing, normally)
    process.wait()
    for reader in readers:
        reader.join(timeout=5)
    return SandboxRun(process.returncode, kept["stdout"].decode(errors="replace"),
                      kept["stderr"].decode(errors="replace"), time.monotonic() - start, timed_out,
                      flooded.is_set())


def check_works() -> None:
    """Raise ``SandboxUnavailable`` unless a trivial command runs in the sandbox (bwrap present and
    allowed to create namespaces here)."""
    result = run([sys.executable, "-c", "print('ok')"], "", timeout=60)
    if result.returncode != 0 or result.stdout.strip() != "ok":
        raise SandboxUnavailable(f"bubblewrap is installed but could not start a sandbox here "
                                 f"(exit {result.returncode}: {result.stderr.strip()[:300]}). Fix: allow user "
                                 "namespaces (sysctl kernel.unprivileged_userns_clone=1), or grade as root.")
