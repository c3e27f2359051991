"""Lesson 3's storage widget in JupyterLab, the students' interface: a real ``jupyter lab``
server and kernel, driven in headless Chromium (Debian's chromium, through Playwright)."""

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import urllib.parse
from pathlib import Path

import pytest

from ftcourse.config import REPO_ROOT

from test_site import SCREENSHOTS, local_browser, require_browser

pytestmark = pytest.mark.slow

LESSON = "03_costs_and_lora.ipynb"
WIDGET_CALL = "costs.storage_widgets("
SCREENSHOT = SCREENSHOTS / "lab-lesson3-widget.png"
START_TIMEOUT = 60  # seconds for the server to answer
RUN_TIMEOUT = 300_000  # ms for the cells up to the widget: a fresh kernel imports torch, transformers, peft

#: JupyterLab user settings for the run (a folder of its own, never the user's): no autosave, so
#: the opened notebook stays as it is; every cell in the DOM, so the test can reach each one; no
#: news or update checks (requests to other machines).
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _digests(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts}


def _get(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def _stop(process: subprocess.Popen, origin: str, token: str) -> None:
    """Shut the server down with its kernels (its API), then end its process group; a kernel
    runs in a session of its own, so any left over is ended by its id."""
    import psutil

    try:
        kernels = [c for c in psutil.Process(process.pid).children(recursive=True)]
    except psutil.Error:
        kernels = []
    if process.poll() is None:
        try:
            request = urllib.request.Request(f"{origin}/api/shutdown", method="POST", data=b"",
                                             headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(request, timeout=5).close()
            process.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    for child in kernels:
        try:
            child.kill()
        except psutil.Error:
            pass


@pytest.fixture
def lab(tmp_path):
    """``jupyter lab`` on 127.0.0.1 and a free port, headless, on a copy of notebooks/ (the
    repository's are never opened), with this process's environment (FTCOURSE_DATA, the cache,
    HF_HUB_OFFLINE...). Yields (origin, token, the copy's root, the server's log); always stopped."""
    require_browser()  # before a server starts for nothing
    root = tmp_path / "course"
    shutil.copytree(REPO_ROOT / "notebooks", root / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    settings = tmp_path / "lab-settings"
    for plugin, values in LAB_SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"), IPYTHONDIR=str(tmp_path / "ipython"),
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    token, port = secrets.token_hex(16), _free_port()
    origin = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyter-lab.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.open_browser=False", "--allow-root",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly"]  # no PyPI queries
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"jupyter lab exited ({process.returncode}) before answering:\n{_tail(log)}")
            try:
                _get(f"{origin}/api/status", token)
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer on {origin} within {START_TIMEOUT} s:\n{_tail(log)}")
                time.sleep(0.5)
        yield origin, token, root, log
    finally:
        _stop(process, origin, token)


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def _widget_cell() -> int:
    import nbformat

    nb = nbformat.read(REPO_ROOT / "notebooks" / LESSON, as_version=4)
    found = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and WIDGET_CALL in c.source]
    assert len(found) == 1, f"{LESSON} should call {WIDGET_CALL}...) in exactly one cell, found {found}"
    return found[0]


def _lora_row(text: str) -> list[str]:
    """The LoRA row of the storage table, its cells (an HTML table's text: tab-separated; as plain
    text: runs of 2+ spaces)."""
    rows = [re.split(r"\t|\s{2,}", line.strip()) for line in text.splitlines() if re.match(r"LoRA\s", line)]
    assert len(rows) == 1, f"one LoRA row expected in the widget's table:\n{text}"
    return rows[0]


def _expected_lora_row(rank: int) -> tuple[str, str]:
    """(trainable, per task) of the LoRA row at ``rank``, as the table prints them, computed here."""
    from ftcourse import costs, models

    cost = next(c for c in costs.regime_costs(models.architecture_config(), rank=rank, targets=("query", "value"))
                if c.regime == "LoRA")
    return f"{cost.trainable:,}", costs.format_bytes(cost.per_task_bytes)


def _cell_errors(page) -> str:
    return "\n".join(page.locator(".jp-Cell .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                     .all_inner_texts())[-3000:]


def _queued_or_run(cell) -> bool:
    """Whether JupyterLab queued or ran ``cell`` (its prompt reads [*] or [n], not [ ])."""
    prompt = cell.locator(".jp-InputPrompt").first.inner_text()
    return bool(re.search(r"\[(\*|\d+)\]", prompt))


def _run_all_above(page, below, cell, attempts: int = 3) -> None:
    """Select ``below`` and pick Run > Run All Above Selected Cell until ``cell`` is queued. A
    click that lands while the page is still settling (a loaded machine) can be lost: the
    cell then stays at [ ] and nothing runs, so the menu is picked again, a few times at most."""
    for attempt in range(attempts):
        page.keyboard.press("Escape")  # close a menu or a dialog a lost click left open
        below.locator(".jp-InputPrompt").first.click()  # the prompt selects the cell, never edits it
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Above Selected Cell$")).click()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if _queued_or_run(cell):
                return
            page.wait_for_timeout(500)
    dialogs = page.locator(".jp-Dialog").all_inner_texts()
    pytest.fail(f"Run All Above Selected Cell did not queue the widget cell in {attempts} attempts; "
                f"dialogs: {dialogs}")


def test_lesson3_storage_widget_redraws_its_table_when_the_rank_slider_moves_in_jupyterlab(lab):
    origin, token, root, log = lab
    repository_before = _digests(REPO_ROOT / "notebooks")
    copy_before = _digests(root / "notebooks")
    widget_cell = _widget_cell()
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    errors = []
    with local_browser(origin, viewport=(1400, 1000)) as (context, left):
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(f"script error: {e}"))
        page.goto(f"{origin}/lab/tree/notebooks/{LESSON}?token={token}")
        cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
        cells.nth(widget_cell + 1).wait_for(timeout=60_000)
        # the kernel (the notebook's python3) started and idle before anything runs
        page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
            timeout=60_000)

        # Run > Run All Above Selected Cell, on the cell after the widget's: the lesson's cells
        # up to the widget compute on bert-base's config (meta device); the later ones train.
        cell = cells.nth(widget_cell)
        _run_all_above(page, cells.nth(widget_cell + 1), cell)

        rank = cell.locator(".widget-slider", has=page.locator(".widget-label", has_text="rank r"))
        table = cell.locator(".widget-output")
        try:
            rank.locator(".noUi-handle").wait_for(timeout=RUN_TIMEOUT)
            page.wait_for_function("e => /^LoRA\\s/m.test(e.innerText)", arg=table.element_handle(),
                                   timeout=30_000)
        except PlaywrightTimeout:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=SCREENSHOT)
            pytest.fail(f"the widget (its rank slider and table) did not show within {RUN_TIMEOUT // 1000} s "
                        f"(screenshot: {SCREENSHOT}); the widget cell shows:\n{cell.inner_text()[-3000:]}\n"
                        f"error outputs:\n{_cell_errors(page)}\nscript errors: {errors}\nserver:\n{_tail(log)}")
        before = _lora_row(table.inner_text())
        assert before[1] == "r=8 on query, value" and tuple(before[2:5:2]) == _expected_lora_row(8), before
        image_before = table.locator("img").first.get_attribute("src")

        rank.locator(".noUi-handle").focus()
        for _ in range(5):
            page.keyboard.press("ArrowRight")
        try:
            rank.locator(".widget-readout", has_text=re.compile(r"^\s*13\s*$")).wait_for(timeout=10_000)
            page.wait_for_function("e => /^LoRA\\s+r=13 on/m.test(e.innerText)", arg=table.element_handle(),
                                   timeout=30_000)
        except PlaywrightTimeout:
            pytest.fail(f"after 5 x ArrowRight on the rank slider (8 -> 13) the readout shows "
                        f"{rank.locator('.widget-readout').inner_text()!r} and the table:\n{table.inner_text()}")
        page.wait_for_timeout(1000)  # a redraw still queued from the intermediate ranks would show here
        after = _lora_row(table.inner_text())
        image_after = table.locator("img").first.get_attribute("src")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        rank.evaluate("e => e.scrollIntoView({block: 'start'})")  # the sliders, the table, the plot
        page.screenshot(path=SCREENSHOT)

    assert after[1] == "r=13 on query, value", after
    trainable, per_task = _expected_lora_row(13)
    assert (after[2], after[4]) == (trainable, per_task), f"the redrawn LoRA row {after}, computed: {trainable}, {per_task}"
    number = lambda s: float(re.sub(r"[^\d.]", "", s))  # noqa: E731
    assert number(after[2]) > number(before[2]) and number(after[4]) > number(before[4]), (before, after)
    assert image_after and image_after != image_before, "the storage plot was not redrawn"
    assert not left, f"JupyterLab asked for things from other machines: {sorted(set(left))}"
    assert not errors, errors
    assert _digests(REPO_ROOT / "notebooks") == repository_before, "the repository's notebooks changed"
    assert _digests(root / "notebooks") == copy_before, "JupyterLab saved the opened notebook (autosave is on?)"
