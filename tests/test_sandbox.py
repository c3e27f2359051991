"""The sandbox every submission runs in: bubblewrap, an unprivileged user, read-only course,
private home, no network, and limits that stop memory hogs, fork bombs and output floods.

These tests need bwrap (`make system-packages` installs it). Without it they skip on a
laptop, and fail under CI=true: a CI that cannot sandbox must not look green."""

import os
import resource
import sys
import threading
import time
import uuid

import pytest

from ftcourse.course import cli, sandbox
from ftcourse.config import REPO_ROOT


def require_bwrap():
    if sandbox.bwrap() is None:
        message = "bubblewrap (bwrap) is not installed: run `make system-packages`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(autouse=True)
def _bwrap():
    require_bwrap()


def run_python(code: str, timeout: float = 60, limits: sandbox.Limits = sandbox.Limits()):
    return sandbox.run([sys.executable, "-c", code], "", timeout=timeout, limits=limits)


class PeakRSS:
    """This process's resident memory, sampled every 50 ms while the block runs (MiB)."""

    def __enter__(self):
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _rss() -> float:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _sample(self):
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> float:
        return self.peak - self.base


def test_it_runs_as_an_unprivileged_user_without_capabilities():
    result = run_python("import os; print(os.getuid(), os.getgid(), os.getgroups()); "
                        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0]); print(os.getcwd())")
    assert result.returncode == 0, result.stderr
    uid, gid, groups = result.stdout.splitlines()[0].split(" ", 2)
    assert uid != "0" and gid != "0" and groups == "[]"
    if os.geteuid() == 0:  # as root, the grader drops to its own uid range
        assert int(uid) >= sandbox.UID_BASE
    assert int(result.stdout.splitlines()[1], 16) == 0  # no capability at all
    assert result.stdout.splitlines()[2] == sandbox.HOME


def test_nothing_outside_changes_and_the_course_is_read_only(tmp_path):
    tag = uuid.uuid4().hex
    home = os.path.expanduser(f"~/ftcourse-sandbox-{tag}")  # the grader's real home, not the sandbox's
    refused = [str(REPO_ROOT / f"ftcourse-sandbox-{tag}"), str(REPO_ROOT / "ftcourse" / f"sandbox-{tag}.py"),
               home, str(tmp_path / "beside-the-grader")]
    private = [f"/tmp/ftcourse-sandbox-{tag}", f"{sandbox.HOME}/ftcourse-sandbox-{tag}"]  # the sandbox's own
    code = ("import os\nfor path in %r:\n    try:\n        open(path, 'w').write('x'); print('WROTE', path)\n"
            "    except OSError as e:\n        print('refused', type(e).__name__)\n"
            "print(sorted(os.listdir(%r)))") % (refused + private, str(REPO_ROOT))
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    wrote = [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("WROTE")]
    assert wrote == private  # inside, its private /tmp and home work; nothing else does
    assert not any(os.path.exists(path) for path in refused + private[:1])
    # Only the package, its data and the environment are visible: not the tests, not the notebooks, not .git.
    visible = eval(result.stdout.splitlines()[-1])
    assert "ftcourse" in visible and ".git" not in visible and "notebooks" not in visible and "tests" not in visible


def test_a_course_under_tmp_stays_visible_and_read_only(tmp_path, monkeypatch):
    # A CI clone or a venv under /tmp must not be hidden by the sandbox's private /tmp.
    course = tmp_path / "clone" / "ftcourse"
    course.mkdir(parents=True)
    (course / "marker.txt").write_text("course file")
    real = sandbox.read_only_paths
    monkeypatch.setattr(sandbox, "read_only_paths", lambda: real() + [course])
    code = ("print(open(%r).read())\ntry:\n    open(%r, 'w')\n    print('WROTE')\nexcept OSError as e:\n"
            "    print('refused', type(e).__name__)") % (str(course / "marker.txt"), str(course / "new.py"))
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["course", "file", "refused", "OSError"]
    assert not (course / "new.py").exists()


def test_no_network():
    result = run_python("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
                        "    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)")
    assert result.returncode == 0 and "refused" in result.stdout, result.stdout + result.stderr


def test_a_memory_hog_hits_the_address_space_limit():
    limits = sandbox.Limits(memory_bytes=1 * sandbox.GiB)
    result = run_python("held = []\ntry:\n    while True:\n        held.append(bytearray(64 * 2**20))\n"
                        "except MemoryError:\n    print('stopped at', len(held) * 64, 'MiB')", limits=limits)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[2]) < 1024


def test_a_fork_bomb_is_bounded_and_dies_with_the_sandbox():
    limits = sandbox.Limits(processes=64)
    code = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
            "            time.sleep(600); os._exit(0)\n        n += 1\nexcept OSError:\n    print('forks', n, flush=True)\n")
    start = time.monotonic()
    result = run_python(code, timeout=60, limits=limits)
    assert result.returncode == 0, result.stderr
    assert 0 < int(result.stdout.split()[1]) < 64
    assert time.monotonic() - start < 30  # the sleeping children did not keep the sandbox alive


def test_an_output_flood_is_stopped_at_bounded_memory():
    limits = sandbox.Limits(output_bytes=4 * sandbox.MiB)
    with PeakRSS() as memory:
        result = run_python("while True:\n    print('x' * 10000)", timeout=120, limits=limits)
    assert result.flooded and not result.timed_out
    assert result.seconds < 20
    assert len(result.stdout) <= limits.output_bytes
    assert memory.growth < 64, f"the grader grew by {memory.growth:.0f} MiB"


def test_the_wall_clock_limit_kills_an_infinite_loop():
    result = run_python("while True:\n    pass", timeout=3)
    assert result.timed_out and result.seconds < 15


def test_without_bwrap_the_grader_refuses_and_says_how_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sandbox, "bwrap", lambda: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install"):
        sandbox.require()
    notebook = tmp_path / "05_exercise_bert_base.ipynb"
    notebook.write_text("not json")
    assert cli.main(["grade", str(notebook), "--report", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "bubblewrap (bwrap) is not installed" in err and "make system-packages" in err and "--no-sandbox" in err
    assert not (tmp_path / "r.json").exists()
    # The explicit flag grades anyway, and says it is not sandboxed.
    assert cli.main(["grade", str(notebook), "--no-sandbox", "--report", str(tmp_path / "r.json")]) == 1
    assert "--no-sandbox" in capsys.readouterr().err


def test_limits_do_not_reach_the_grader():
    run_python("print(1)", limits=sandbox.Limits(processes=8, memory_bytes=sandbox.GiB))
    assert resource.getrlimit(resource.RLIMIT_NPROC)[0] != 8


# ----------------------------------------------------------------------------- the whole sandbox: cgroups, tmpfs sizes


def require_cgroups():
    support = sandbox.cgroups()
    if not support.kind:
        pytest.skip(f"no cgroup for the sandboxes here: {support.missing}")
    return support


def leftover_cgroups(support) -> list:
    """This process's sandbox cgroups still there (another test process may be grading meanwhile)."""
    mine = f"{sandbox.CGROUP_PREFIX}-{os.getpid()}-"
    return [p for _, parent in support.parents for p in os.listdir(parent) if p.startswith(mine)]


def test_the_whole_sandbox_is_capped_in_memory_not_only_each_process():
    support = require_cgroups()
    # Four processes of 200 MiB each: every one is far under its own address-space limit (4 GiB),
    # together they pass the sandbox's 400 MiB.
    limits = sandbox.Limits(memory_bytes=4 * sandbox.GiB, sandbox_memory_bytes=400 * sandbox.MiB)
    code = ("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        b = bytearray(200 * 2**20)\n"
            "        b[::4096] = b'x' * len(b[::4096])\n        time.sleep(5)\n        os._exit(0)\n"
            "killed = sum(os.WIFSIGNALED(os.wait()[1]) for _ in range(4))\nprint('killed', killed)")
    result = run_python(code, timeout=60, limits=limits)
    assert result.cgroup == support.kind
    assert result.oom_killed, (result.stdout, result.stderr)
    if result.returncode == 0:  # the parent itself may be the one the kernel chose
        assert int(result.stdout.split()[1]) >= 1, result.stdout
    assert not leftover_cgroups(support)  # killed and removed


def test_the_whole_sandbox_is_capped_in_processes():
    support = require_cgroups()
    limits = sandbox.Limits(processes=256, sandbox_tasks=24)
    code = ("import os, time\nn = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n"
            "            time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint('forks', n)")
    result = run_python(code, timeout=60, limits=limits)
    assert result.returncode == 0, result.stderr
    assert 0 < int(result.stdout.split()[1]) < 24  # the per-uid limit (256) was not what stopped it
    assert not leftover_cgroups(support)


def test_without_cgroups_it_says_what_is_missing_once_and_keeps_the_per_process_limits(monkeypatch, tmp_path,
                                                                                       capsys):
    monkeypatch.setattr(sandbox, "cgroups", lambda: sandbox.Cgroups("", missing="cgroup v2 at /x lacks memory"))
    result = run_python("print('ok')")
    assert result.returncode == 0 and result.stdout.strip() == "ok" and result.cgroup == ""
    result = run_python("held = []\ntry:\n    while True:\n        held.append(bytearray(64 * 2**20))\n"
                        "except MemoryError:\n    print('stopped')", limits=sandbox.Limits(memory_bytes=sandbox.GiB))
    assert result.stdout.strip() == "stopped"
    notebook = tmp_path / "05_exercise_bert_base.ipynb"
    notebook.write_text("not json")
    assert cli.main(["grade", str(notebook), "--report", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert err.count("warning: no cgroup for the sandboxes (cgroup v2 at /x lacks memory)") == 1


def test_the_probe_reports_what_it_found():
    support = sandbox.cgroups()
    assert support.kind in ("cgroup v2", "cgroup v1", "systemd-run", "systemd-run --user") or support.missing
    assert bool(sandbox.cgroup_warning()) == (not support.kind)
    assert sandbox.GiB // 4 < sandbox.machine_memory() < 2**50


def test_tmp_home_and_dev_shm_are_size_capped_tmpfs():
    if not sandbox.supports_size(sandbox.require()):
        pytest.skip("this bwrap has no --size")
    full = sandbox.command(["true"], sandbox.Limits(), {})
    for folder, size in (("/tmp", sandbox.Limits().tmp_bytes), ("/dev/shm", sandbox.Limits().shm_bytes)):
        at = next(i for i in range(len(full)) if full[i - 1:i + 1] == ["--tmpfs", folder])
        assert full[at - 5:at - 1] == ["--size", str(size), "--perms", "01777"]
    limits = sandbox.Limits(tmp_bytes=32 * sandbox.MiB, shm_bytes=8 * sandbox.MiB)
    code = ("import os\nfor path in ('/tmp/home/big', '/tmp/big', '/dev/shm/big'):\n    written = 0\n"
            "    try:\n        with open(path, 'wb') as f:\n            for _ in range(64):\n"
            "                f.write(b'x' * 2**20); f.flush(); written += 1\n    except OSError as e:\n"
            "        pass\n    print(path, written)\n    os.unlink(path)")
    result = run_python(code, limits=limits)
    assert result.returncode == 0, result.stderr
    written = {line.split()[0]: int(line.split()[1]) for line in result.stdout.splitlines()}
    assert written["/tmp/home/big"] <= 32 and written["/tmp/big"] <= 32 and written["/dev/shm/big"] <= 8, written


def test_cgroups_left_by_a_killed_grader_are_removed():
    support = require_cgroups()
    if not support.parents:
        pytest.skip("systemd-run scopes are collected by systemd")
    stale = os.path.join(support.parents[0][1], f"{sandbox.CGROUP_PREFIX}-{2**22 + 1}-0")  # no such pid
    os.mkdir(stale)
    mine = os.path.join(support.parents[0][1], f"{sandbox.CGROUP_PREFIX}-{os.getpid()}-999999")
    os.mkdir(mine)
    try:
        sandbox._remove_stale(support)
        assert not os.path.exists(stale) and os.path.exists(mine)  # a live grader's cgroups are left alone
    finally:
        for path in (stale, mine):
            if os.path.exists(path):
                os.rmdir(path)


def test_the_cgroup_v2_probe_and_limits_on_a_fake_hierarchy(tmp_path, monkeypatch):
    """cgroup v2 as a delegated subtree would look (this machine may have only v1): the probe enables
    memory and pids for the children, or says which controller is lacking; a run's cgroup gets the limits."""
    own = tmp_path / "user.slice" / "grader"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(sandbox, "_mounts", lambda: [(str(tmp_path), "/", "cgroup2", set())])
    monkeypatch.setattr(sandbox, "_own_cgroups", lambda: {"": "/user.slice/grader"})
    support = sandbox._probe_v2()
    assert support == sandbox.Cgroups("cgroup v2", (("", str(own)),))
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    group = sandbox._RunCgroup(support, 3 * sandbox.GiB, 99)
    folder = group.made[0]
    assert (folder / "memory.max").read_text() == str(3 * sandbox.GiB) and (folder / "pids.max").read_text() == "99"
    wrapped = group.wrap(["bwrap", "x"])
    assert wrapped[:2] == ["sh", "-c"] and wrapped[-4:] == ["1", str(folder / "cgroup.procs"), "bwrap", "x"]
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.oom_killed()
    (own / "cgroup.controllers").write_text("cpu io\n")
    assert sandbox._probe_v2() == f"cgroup v2 at {own} lacks the memory and pids controller"
