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
  run), CPU time, file size, no core dumps;
- where the machine allows it, limits on the *whole* sandbox, every process together: each run
  gets its own cgroup (``cgroups()`` finds one: cgroup v2 with the memory and pids controllers,
  else the v1 memory and pids hierarchies, else ``systemd-run --scope``) with ``memory.max``
  (``Limits.sandbox_memory_bytes``: the grader gives each of its workers an equal share of the
  machine's memory) and ``pids.max``; it is killed and removed when the run ends. Where none is
  usable, ``cgroups().missing`` says what is missing, ``ftcourse grade`` prints it once, and
  the per-process limits remain. The private ``/tmp`` (the home is in it) and ``/dev/shm`` are
  size-capped tmpfs (``bwrap --size``).

The grader reads the command's stdout through a pipe and keeps at most ``output_bytes``:
past that the whole sandbox is killed and ``SandboxRun.flooded`` says so, so a print flood
costs the grader a bounded buffer, not its memory. A wall-clock limit kills it the same way.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..config import REPO_ROOT

INSTALL_HINT = ("bubblewrap (bwrap) is not installed. Fix: `make system-packages` (runs apt-get install -y "
                "bubblewrap), or `sudo apt-get install bubblewrap`; to grade without a sandbox anyway, pass "
                "--no-sandbox (only for notebooks you trust).")
#: The first uid of the range the grader drops to when it runs as root; run k uses UID_BASE + k.
UID_BASE = int(os.environ.get("FTCOURSE_SANDBOX_UID_BASE", "61000"))
HOME = "/tmp/home"
#: Where the writable folder the grader hands a run (``run(writable=...)``) appears inside the sandbox.
WRITABLE = "/tmp/evidence"
WATCH_SECONDS = 0.2
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
    tmp_bytes: int = 1 * GiB  # size of its private /tmp and home (held in memory)
    shm_bytes: int = 64 * MiB  # size of its private /dev/shm
    output_bytes: int = 8 * MiB  # stdout kept by the grader; more is a flood
    #: The whole sandbox's memory, all its processes and its tmpfs together (cgroup memory.max);
    #: None: the machine's memory (``machine_memory()``). The grader gives each worker its share.
    sandbox_memory_bytes: int | None = None
    sandbox_tasks: int = 1024  # the whole sandbox's processes and threads (cgroup pids.max)
    #: The most a run may write into its writable folder (the grader's evidence), all files together;
    #: checked every ``WATCH_SECONDS`` (each file is also capped by ``file_bytes``).
    writable_bytes: int = 2 * GiB


@dataclass
class SandboxRun:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    flooded: bool = False
    cgroup: str = ""  # how the whole sandbox was limited (``Cgroups.kind``), "" if it was not
    oom_killed: bool = False  # the whole-sandbox memory limit killed a process
    overfilled: bool = False  # its writable folder grew past ``Limits.writable_bytes``: it was killed


def bwrap() -> str | None:
    return shutil.which("bwrap")


def require() -> str:
    path = bwrap()
    if not path:
        raise SandboxUnavailable(INSTALL_HINT)
    return path


@functools.lru_cache(maxsize=4)
def supports_size(path: str) -> bool:
    """Whether this bwrap has ``--size`` (a size cap for the next ``--tmpfs``)."""
    try:
        done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in done.stdout + done.stderr


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


#: How many uids from ``UID_BASE`` on the runs of all graders on this machine may hold at once.
UID_RANGE = 512


@contextlib.contextmanager
def claimed_uid(slot: int = 0):
    """A uid from ``UID_BASE`` on that no other sandbox run on this machine holds, held until the block
    ends: an exclusive lock on a file per uid, so that two graders at once (or two test processes) never
    share one. RLIMIT_NPROC counts per uid: a shared one would let one run's processes starve another's."""
    import fcntl

    folder = Path(tempfile.gettempdir()) / "ftcourse-sandbox-uids"
    folder.mkdir(mode=0o700, exist_ok=True)
    for offset in range(UID_RANGE):
        uid = UID_BASE + (slot + offset) % UID_RANGE
        handle = open(folder / f"{uid}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        try:
            yield uid
        finally:
            handle.close()
        return
    raise SandboxUnavailable(f"all {UID_RANGE} sandbox uids from {UID_BASE} are in use. Fix: fewer graders at once.")


def command(argv: list[str], limits: Limits, env: dict, slot: int = 0, writable: str | None = None,
            uid: int | None = None, overlays=()) -> list[str]:
    """The full command line: bwrap, then (as root) setpriv, then prlimit, then ``argv``.
    ``writable``: a folder of the grader's, the only one the sandbox may write to outside its
    private /tmp, bound at ``WRITABLE``. ``uid``: the one to drop to as root (``claimed_uid``; default
    ``UID_BASE + slot``). ``overlays``: ``(source, target)`` folders, each bound read-only over a
    read-only path (the exercise's build of the package over the package, ``withheld``)."""
    uid = UID_BASE + slot if uid is None else uid
    # The private /tmp comes first: bwrap mounts in order, so a course or venv under /tmp (a CI
    # clone, say) is bound on top of it afterwards instead of being hidden by it.
    path = require()
    # --size (bubblewrap 0.5+) caps a tmpfs; an older bwrap would refuse it, so it is left out there.
    size = (lambda n: ["--size", str(n)]) if supports_size(path) else (lambda n: [])
    args = [path, *_system_binds(), "--proc", "/proc", "--dev", "/dev",
            *size(limits.shm_bytes), "--perms", "01777", "--tmpfs", "/dev/shm",
            *size(limits.tmp_bytes), "--perms", "01777", "--tmpfs", "/tmp"]
    made = {Path("/usr"), Path("/etc"), Path("/tmp")}
    if writable is not None:
        if os.geteuid() == 0:  # the unprivileged uid the run drops to must be able to write there
            os.chown(writable, uid, uid)
        os.chmod(writable, 0o700)
        args += ["--bind", str(writable), WRITABLE]
    for path in read_only_paths():
        # bwrap creates missing parents as 0700 (root's home would stay closed to the unprivileged user).
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in made and not parent.is_relative_to(Path("/usr")):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += ["--ro-bind", str(path), str(path)]
    for source, target in overlays:  # after the paths they cover: bwrap mounts in order, the last on top
        args += ["--ro-bind", str(source), str(target)]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv"]
    for name, value in {"HOME": HOME, "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
                        **env}.items():
        args += ["--setenv", name, str(value)]
    if os.geteuid() == 0:
        # bwrap (root) mounts; setpriv then drops to an unprivileged uid of our own, keeping no capability.
        uid = str(uid)
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


# ----------------------------------------------------------------------------- whole-sandbox limits (cgroups)

CGROUP_PREFIX = "ftcourse-sandbox"
_runs = itertools.count()


@dataclass(frozen=True)
class Cgroups:
    """How each run's whole sandbox is limited here: ``kind`` ("cgroup v2", "cgroup v1",
    "systemd-run" or "systemd-run --user"), the folders its cgroups are made in (``parents``:
    controller -> folder; v2's controller is ""), or, when ``kind`` is "", what is missing."""

    kind: str
    parents: tuple = ()
    missing: str = ""


def _mounts() -> list[tuple[str, str, str, set]]:
    """(mount point, root inside the hierarchy, file system type, super options) of the cgroup mounts."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts, after = fields.split(), rest.split()
        if len(parts) >= 5 and len(after) >= 3 and after[0] in ("cgroup", "cgroup2"):
            found.append((parts[4], parts[3], after[0], set(after[2].split(","))))
    return found


def _own_cgroups() -> dict:
    """Controller -> this process's cgroup path ("" for the v2 hierarchy)."""
    own = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            own[""] = path
        for controller in controllers.split(","):
            if controller:
                own[controller] = path
    return own


def _folder(mount: str, root: str, path: str) -> Path | None:
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    relative = path[len(root):] if root != "/" else path
    return Path(mount) / relative.lstrip("/")


def _try_mkdir(parent: Path) -> str:
    """"" when a cgroup can be made (and removed) under ``parent``, else why not."""
    probe = parent / f"{CGROUP_PREFIX}-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return ""
    except OSError as error:
        return f"{parent} is not writable ({error.strerror})"


def _probe_v2():
    mount = next(((m, r) for m, r, kind, _ in _mounts() if kind == "cgroup2"), None)
    own = _own_cgroups().get("")
    if mount is None or own is None:
        return "no cgroup v2 hierarchy is mounted"
    folder = _folder(*mount, own)
    if folder is None or not folder.is_dir():
        return f"this process's cgroup v2 ({own}) is not visible under {mount[0]}"
    try:
        available = set((folder / "cgroup.controllers").read_text().split())
    except OSError as error:
        return f"cannot read {folder / 'cgroup.controllers'} ({error.strerror})"
    lacking = {"memory", "pids"} - available
    if lacking:
        return f"cgroup v2 at {folder} lacks the {' and '.join(sorted(lacking))} controller"
    try:
        enabled = set((folder / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= enabled:
            (folder / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as error:
        return f"cannot enable memory and pids for the cgroups under {folder} ({error.strerror})"
    why = _try_mkdir(folder)
    return why or Cgroups("cgroup v2", (("", str(folder)),))


def _probe_v1():
    own, parents = _own_cgroups(), []
    for controller in ("memory", "pids"):
        mount = next(((m, r) for m, r, kind, options in _mounts() if kind == "cgroup" and controller in options),
                     None)
        if mount is None or controller not in own:
            return f"no cgroup v1 {controller} hierarchy is mounted"
        folder = _folder(*mount, own[controller])
        if folder is None or not folder.is_dir():
            return f"this process's cgroup v1 {controller} ({own[controller]}) is not visible under {mount[0]}"
        why = _try_mkdir(folder)
        if why:
            return f"cgroup v1 {controller}: {why}"
        parents.append((controller, str(folder)))
    return Cgroups("cgroup v1", tuple(parents))


def _probe_systemd():
    if not shutil.which("systemd-run"):
        return "systemd-run is not installed"
    # Not root: the user's own systemd instance makes the scope (a delegated cgroup v2 subtree).
    base = ["systemd-run"] + (["--user"] if os.geteuid() != 0 else [])
    try:
        done = subprocess.run([*base, "--scope", "--quiet", "--collect", "-p", "MemoryMax=1G",
                               "-p", "TasksMax=64", "--", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"systemd-run --scope failed ({error})"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[0]
        return f"{' '.join(base)} --scope failed ({why})"
    return Cgroups(" ".join(base))


@functools.lru_cache(maxsize=1)
def cgroups() -> Cgroups:
    """How whole sandboxes are limited on this machine (probed once): cgroup v2, else v1, else
    ``systemd-run --scope``; ``Cgroups("", missing=...)`` says what is missing for each.
    ``FTCOURSE_SANDBOX_CGROUPS=0`` turns them off."""
    if os.environ.get("FTCOURSE_SANDBOX_CGROUPS") == "0":
        return Cgroups("", missing="turned off by FTCOURSE_SANDBOX_CGROUPS=0")
    reasons = []
    for probe in (_probe_v2, _probe_v1, _probe_systemd):
        found = probe()
        if isinstance(found, Cgroups):
            _remove_stale(found)
            return found
        reasons.append(found)
    return Cgroups("", missing="; ".join(reasons))


def _remove_stale(support: Cgroups) -> None:
    """Remove the (empty) cgroups an earlier grader left behind when it was killed before cleaning up."""
    for _, parent in support.parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            pid = name[len(CGROUP_PREFIX) + 1:].split("-")[0]
            if not name.startswith(CGROUP_PREFIX + "-") or not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
                continue  # its grader is still running
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            try:
                os.rmdir(Path(parent) / name)
            except OSError:
                pass


def cgroup_warning() -> str:
    """One line for the instructor: what limits each whole sandbox here, or what is missing."""
    support = cgroups()
    if support.kind:
        return ""
    return (f"warning: no cgroup for the sandboxes ({support.missing}): each process keeps its own limits "
            "(address space, processes, CPU time, file size), but nothing caps a whole sandbox's memory or "
            "process count. Fix: grade on a machine with cgroup v2 (memory and pids delegated) or systemd.")


def machine_memory() -> int:
    """The memory this grader may use: the machine's, or this process's cgroup limit when lower."""
    total = 8 * GiB
    try:
        total = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        pass
    own = _own_cgroups()
    for mount, root, kind, options in _mounts():
        name, controller = ("memory.max", "") if kind == "cgroup2" else ("memory.limit_in_bytes", "memory")
        if kind == "cgroup" and "memory" not in options or controller not in own:
            continue
        folder = _folder(mount, root, own[controller])
        try:
            value = (folder / name).read_text().strip() if folder else "max"
        except OSError:
            continue
        if value.isdigit():
            total = min(total, int(value))
    return total


class _RunCgroup:
    """The cgroup(s) of one run: made with its limits, joined by the run's first process (a shell
    that then execs the sandbox), killed and removed at the end."""

    def __init__(self, support: Cgroups, memory: int, tasks: int):
        self.kind, self.made, self.procs, self.prefix = support.kind, [], [], []
        name = f"{CGROUP_PREFIX}-{os.getpid()}-{next(_runs)}"
        self.memory_folder = None
        try:
            if support.kind.startswith("systemd-run"):
                self.prefix = [*support.kind.split(), "--scope", "--quiet", "--collect", "-p", f"MemoryMax={memory}",
                               "-p", "MemorySwapMax=0", "-p", f"TasksMax={tasks}", "--"]
                return
            for controller, parent in support.parents:
                folder = Path(parent) / name
                folder.mkdir()
                self.made.append(folder)
                if controller == "":  # v2: one cgroup, both limits
                    (folder / "memory.max").write_text(str(memory))
                    (folder / "pids.max").write_text(str(tasks))
                    _write_optional(folder / "memory.swap.max", "0")
                    self.memory_folder = folder
                elif controller == "memory":
                    (folder / "memory.limit_in_bytes").write_text(str(memory))
                    _write_optional(folder / "memory.memsw.limit_in_bytes", str(memory))  # no swap either
                    self.memory_folder = folder
                else:
                    (folder / "pids.max").write_text(str(tasks))
                self.procs.append(str(folder / "cgroup.procs"))
        except OSError as error:
            self.close()
            raise OSError(error.errno, f"cannot set up the sandbox's cgroup under {parent}: {error.strerror}")

    def wrap(self, argv: list[str]) -> list[str]:
        if self.prefix:
            return self.prefix + argv
        # The shell joins the cgroup(s) before it execs the sandbox: everything the sandbox starts is inside.
        script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
        return ["sh", "-c", script, "ftcourse-cgroup", str(len(self.procs)), *self.procs, *argv]

    def oom_killed(self) -> bool:
        if self.memory_folder is None:
            return False
        for name in ("memory.events", "memory.oom_control"):
            try:
                for line in (self.memory_folder / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                        return True
            except OSError:
                continue
        return False

    def close(self) -> None:
        """Kill whatever is left in the cgroup(s) and remove them."""
        for folder in self.made:
            if _write_optional(folder / "cgroup.kill", "1"):
                continue
            for _ in range(50):
                try:
                    pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)
        for folder in reversed(self.made):
            for _ in range(100):  # the killed processes take a moment to leave
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        self.made = []


def _write_optional(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


_warned = set()


def _run_cgroup(limits: Limits) -> _RunCgroup | None:
    """This run's cgroup, or None (no cgroup here, or it could not be made: warned about once)."""
    support = cgroups()
    if not support.kind:
        return None
    try:
        return _RunCgroup(support, limits.sandbox_memory_bytes or machine_memory(), limits.sandbox_tasks)
    except OSError as error:
        if str(error) not in _warned:
            _warned.add(str(error))
            warnings.warn(f"{error}; the sandbox runs with its per-process limits only", RuntimeWarning, stacklevel=3)
        return None


def _kill(process: subprocess.Popen) -> None:
    """Kill the sandbox: bwrap's own init dies with it (--die-with-parent), and with it every
    process of the sandbox's PID namespace, forks included."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(argv: list[str], stdin: str, timeout: float, limits: Limits = Limits(), env: dict | None = None,
        slot: int = 0, sandbox: bool = True, writable: str | None = None, overlays=()) -> SandboxRun:
    """Run ``argv`` (sandboxed unless ``sandbox=False``), feeding ``stdin``; never raises for what
    the command does. stdout beyond ``limits.output_bytes`` kills it (``flooded``). Where
    ``cgroups()`` finds a way, the whole run is in a cgroup of its own (``SandboxRun.cgroup``).
    ``writable``: a folder of the grader's the run may write to (at ``WRITABLE`` inside the sandbox,
    at its own path unsandboxed); past ``limits.writable_bytes`` in it the run is killed (``overfilled``).
    ``overlays``: as ``command``'s (sandboxed only: unsandboxed, the run sees this machine's files)."""
    if sandbox:
        with claimed_uid(slot) as uid:
            return _run(command(argv, limits, env or {}, slot, writable, uid, overlays), stdin, timeout, limits, None,
                        None, writable)
    # Unsandboxed (--no-sandbox): at least a throwaway working directory, not the grader's, removed whatever
    # the run left in it.
    folder = tempfile.mkdtemp(prefix="ftcourse-unsandboxed-")
    try:
        return _run(list(argv), stdin, timeout, limits, {**os.environ, **(env or {})}, folder, writable)
    finally:
        remove_tree(folder)


#: More files than this in a writable folder counts as overfilling it (walking it must stay quick).
MAX_WRITABLE_FILES = 10_000


def folder_bytes(path: str) -> int:
    """The bytes of every file under ``path`` (links not followed); past ``MAX_WRITABLE_FILES``
    files, more than any cap."""
    total, count = 0, 0
    for root, dirs, files in os.walk(path, followlinks=False):
        count += len(files) + len(dirs)
        if count > MAX_WRITABLE_FILES:
            return 1 << 62
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _run(full: list[str], stdin: str, timeout: float, limits: Limits, child_env: dict | None,
         cwd: str | None, writable: str | None = None) -> SandboxRun:
    group = _run_cgroup(limits)
    if group is None:
        return _run_in(full, stdin, timeout, limits, child_env, cwd, writable)
    try:
        run = _run_in(group.wrap(full), stdin, timeout, limits, child_env, cwd, writable)
        run.cgroup, run.oom_killed = group.kind, group.oom_killed()
        return run
    finally:
        group.close()  # whatever is left in it is killed, and the cgroup removed


def _run_in(full: list[str], stdin: str, timeout: float, limits: Limits, child_env: dict | None,
            cwd: str | None, writable: str | None = None) -> SandboxRun:
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
    timed_out, overfilled = False, False
    deadline = start + timeout
    while True:  # wait, and watch the writable folder's size meanwhile
        try:
            process.wait(timeout=min(WATCH_SECONDS, max(0.0, deadline - time.monotonic())) if writable else
                         max(0.0, deadline - time.monotonic()))
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                timed_out = True
                break
            if writable and folder_bytes(writable) > limits.writable_bytes:
                overfilled = True
                break
    _kill(process)  # whatever is left in the session (nothing, normally)
    process.wait()
    for reader in readers:
        reader.join(timeout=5)
    overfilled = overfilled or bool(writable and folder_bytes(writable) > limits.writable_bytes)
    return SandboxRun(process.returncode, kept["stdout"].decode(errors="replace"),
                      kept["stderr"].decode(errors="replace"), time.monotonic() - start, timed_out,
                      flooded.is_set(), overfilled=overfilled)


def remove_tree(path) -> None:
    """Remove the folder ``path`` and whatever a sandboxed run left in it: any depth (no recursion, and at
    most two folders open at a time, so neither Python's stack, the open-files limit nor PATH_MAX stops it:
    ``shutil.rmtree``, hence ``TemporaryDirectory``, raises RecursionError at 1,000 nested folders and leaves
    the tree behind), folders made unreadable or unwritable (made ours to empty first), links removed, never
    followed. Raises ``OSError`` only for what cannot be removed at all."""
    path = os.path.abspath(path)
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
    except FileNotFoundError:
        return
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    head, name = os.path.split(path)
    fd = os.open(head, flags & ~os.O_NOFOLLOW)
    ids, names = [_identity(fd)], []  # the open folder's ancestors, and the path to it from ``head``

    def enter(sub: str) -> None:
        nonlocal fd
        with contextlib.suppress(OSError, NotImplementedError):  # root needs no permission; a link is no folder
            os.chmod(sub, 0o700, dir_fd=fd, follow_symlinks=False)
        child = os.open(sub, flags, dir_fd=fd)  # O_NOFOLLOW: a link swapped in is refused, never entered
        os.close(fd)
        fd = child
        ids.append(_identity(fd))
        names.append(sub)

    try:
        enter(name)
        while names:
            sub = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
            if sub is not None:
                enter(sub)
                continue
            # Empty: back up to its parent (checked to be the folder it came from) and remove it.
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            ids.pop()
            if _identity(fd) != ids[-1]:
                raise OSError(f"{path} changed while being removed (a folder was moved)")
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)


def _identity(fd: int) -> tuple:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


class NotReadable(ValueError):
    """A file written by untrusted code that the grader will not read: not a regular file, or too big."""


_KINDS = ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def read_untrusted(path, cap: int) -> bytes:
    """The bytes of a file untrusted code made or handed in, or ``NotReadable``: only a regular file
    (checked with ``os.lstat``; a symlink is never followed, even at open time) of at most ``cap`` bytes,
    read through one descriptor and never more than ``cap + 1`` bytes."""
    path = Path(path)
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        raise NotReadable(f"not a regular file ({_kind(before.st_mode)})")
    if before.st_size > cap:
        raise NotReadable(f"{before.st_size:,} bytes, over the cap of {cap:,} bytes")
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a FIFO after the lstat neither
    # gets followed nor blocks the grader; fstat then checks it is still the same regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise NotReadable("not a regular file (it changed while being opened)")
        chunks, size = [], 0
        while size <= cap and (chunk := os.read(fd, min(1 << 20, cap + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > cap:
        raise NotReadable(f"over the cap of {cap:,} bytes")
    return b"".join(chunks)


def check_works() -> None:
    """Raise ``SandboxUnavailable`` unless a trivial command runs in the sandbox (bwrap present and
    allowed to create namespaces here)."""
    result = run([sys.executable, "-c", "print('ok')"], "", timeout=60)
    if result.returncode != 0 or result.stdout.strip() != "ok":
        raise SandboxUnavailable(f"bubblewrap is installed but could not start a sandbox here "
                                 f"(exit {result.returncode}: {result.stderr.strip()[:300]}). Fix: allow user "
                                 "namespaces (sysctl kernel.unprivileged_userns_clone=1), or grade as root.")
