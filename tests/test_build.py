"""`make course` runs notebooks side by side: the scheduling, each kernel's threads, and cache
entries that two notebooks may write at the same time."""

import os
import time
from pathlib import Path

import nbformat
import pytest

from ftcourse import config

from ftcourse.course import notebooks


def small_notebook(path: Path, source: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = notebooks.KERNELSPEC
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_the_heaviest_notebooks_go_first_by_their_measured_seconds_and_unmeasured_ones_last(tmp_path):
    names = ["notebooks/01_composition", "notebooks/02_feature_readout", "notebooks/07_new", "notebooks/06_new",
             "solutions/05_exercise_bert_base", "notebooks/05_exercise_bert_base"]
    paths = [tmp_path / f"{name}.ipynb" for name in names]
    timings = {"notebooks/01_composition": {"seconds": 100.0}, "notebooks/02_feature_readout": {"seconds": 300.0},
               "solutions/05_exercise_bert_base": {"seconds": 500.0}, "notebooks/05_exercise_bert_base": {"seconds": 9.0}}
    order = [f"{p.parent.name}/{p.stem}" for p in notebooks.build_order(paths, timings)]
    assert order == ["solutions/05_exercise_bert_base", "notebooks/02_feature_readout", "notebooks/01_composition",
                     "notebooks/05_exercise_bert_base", "notebooks/07_new", "notebooks/06_new"]
    timings["notebooks/01_composition"]["seconds"] = 900.0  # a new measurement reorders the build
    assert notebooks.build_order(paths, timings)[0].stem == "01_composition"


def test_every_committed_notebook_has_a_measured_time():
    measured = notebooks.read_timings()
    for path in notebooks.course_notebooks():
        assert f"{path.parent.name}/{path.stem}" in measured, path


def test_jobs_follow_the_cores_and_stay_at_one_on_a_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert notebooks.default_jobs(6) == 2
    assert notebooks.default_jobs(1) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert notebooks.default_jobs(6) == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert notebooks.default_jobs(6) == notebooks.MAX_PARALLEL_NOTEBOOKS
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert notebooks.default_jobs(6) == 1


def test_a_parallel_build_runs_every_notebook_on_its_share_of_the_threads(tmp_path, monkeypatch):
    source = tmp_path / "src"
    report = "import os, torch; print(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())"
    paths = [small_notebook(source / "notebooks" / f"0{i}_lesson.ipynb", report) for i in (1, 2)]
    paths.append(small_notebook(source / "notebooks" / "03_broken.ipynb", "raise RuntimeError('broken on purpose')"))
    monkeypatch.setattr(notebooks, "course_notebooks", lambda: paths)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    out = tmp_path / "build"
    assert notebooks.build(out, timeout=120, site=False, jobs=2) == 1  # the broken one, and only it
    for name in ("01_lesson", "02_lesson"):
        executed = nbformat.read(out / "notebooks" / f"{name}.ipynb", as_version=4)
        assert executed.cells[0].outputs[0]["text"].split() == ["1", "1"]
    assert not nbformat.read(paths[0], as_version=4).cells[0].outputs  # the sources stay as they were


def test_a_failing_notebook_is_reported_by_cell_source_and_error_and_the_build_goes_on(tmp_path, monkeypatch, capsys):
    source = tmp_path / "src"
    broken = small_notebook(source / "notebooks" / "02_broken.ipynb", "x = 1")
    nb = nbformat.read(broken, as_version=4)
    nb.cells += [nbformat.v4.new_markdown_cell("text"),
                 nbformat.v4.new_code_cell("# the cell that breaks\nraise KeyError('no such column')")]
    nbformat.write(nb, broken)
    fine = small_notebook(source / "notebooks" / "01_fine.ipynb", "print('fine')")
    monkeypatch.setattr(notebooks, "course_notebooks", lambda: [fine, broken])
    assert notebooks.build(tmp_path / "build", timeout=120, site=False, jobs=1) == 1
    printed = capsys.readouterr().out
    assert "02_broken.ipynb: cell 2 raised KeyError: 'no such column'" in printed
    assert "| # the cell that breaks" in printed
    assert "01_fine.ipynb" in printed and "ok" in printed


def test_the_build_shows_progress_per_notebook_and_records_cell_times_for_the_next(tmp_path, monkeypatch, capsys):
    source = tmp_path / "src"
    path = small_notebook(source / "notebooks" / "01_lesson.ipynb", "import time; time.sleep(0.2)")
    nb = nbformat.read(path, as_version=4)
    nb.cells += [nbformat.v4.new_code_cell("time.sleep(0.2)"), nbformat.v4.new_code_cell("print('done')")]
    nbformat.write(nb, path)
    key = "notebooks/01_lesson"
    previous = {key: {"seconds": 9.0, "cells": {"0": 3.0, "1": 4.0, "2": 2.0}}}
    progress = notebooks.BuildProgress([path], previous, live=False, every=0.0)  # a line after every cell
    notebooks._execute_into(path, tmp_path / "build", 120, None, progress)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(key)]
    assert lines[0] == f"{key:<34} started (last time 0:09)"
    assert "1/3" in lines[1] and "about 0:06 left" in lines[1]  # cells 1 and 2 took 4 + 2 s last time
    assert "3/3" in lines[3] and "about 0:00 left" in lines[3]
    progress.save(tmp_path / "build")
    recorded = notebooks.read_timings(tmp_path / "build")[key]
    assert set(recorded["cells"]) == {"0", "1", "2"} and recorded["cells"]["1"] >= 0.2


def test_a_first_build_reads_the_committed_measured_timings(tmp_path):
    timings = notebooks.read_timings(tmp_path / "empty-build")
    assert set(timings) >= {"notebooks/03_costs_and_lora", "solutions/05_exercise_bert_base"}


def test_kernels_talk_over_ipc_so_no_transport_warning_reaches_the_build(tmp_path, capfd):
    path = small_notebook(tmp_path / "notebooks" / "01_lesson.ipynb",
                          "import ipykernel.kernelapp as k; print(k.IPKernelApp.instance().transport)")
    executed = notebooks.execute(path, timeout=120)
    assert executed.cells[0].outputs[0]["text"].strip() == "ipc"
    assert "without encryption" not in capfd.readouterr().err


def test_a_build_rejects_zero_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "course_notebooks", lambda: [])
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        notebooks.build(tmp_path, site=False, jobs=-1)


def test_a_cache_entry_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "cache" / "features" / "entry.bin"
    with config.publishing(target) as private:
        assert not target.exists()
        private.write_bytes(b"abc")
    assert target.read_bytes() == b"abc"
    with pytest.raises(RuntimeError):
        with config.publishing(tmp_path / "crashed.bin") as private:
            private.write_bytes(b"half")
            raise RuntimeError("stopped mid-write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # no half file, no leftover


def test_a_folder_entry_written_twice_keeps_the_first(tmp_path):
    folder = tmp_path / "siamese" / "mean-abc"
    for content in ("first", "second"):  # two notebooks training the same model side by side
        with config.publishing(folder) as private:
            private.mkdir()
            (private / "weights").write_text(content)
    assert (folder / "weights").read_text() == "first"
    assert [p.name for p in folder.parent.iterdir()] == ["mean-abc"]


def test_a_log_gets_a_line_even_in_the_middle_of_a_long_cell(tmp_path, capsys):
    path = small_notebook(tmp_path / "notebooks" / "01_lesson.ipynb", "import time; time.sleep(60)")
    progress = notebooks.BuildProgress([path], {}, live=False, every=0.0)
    progress.start(path)
    capsys.readouterr()
    progress.tick()  # no cell has finished yet
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("notebooks/01_lesson") and "0/1   cells" in line and "time left unknown" in line
    progress.finish(path, "ok", 1.0)
    capsys.readouterr()
    progress.tick()  # a finished notebook says nothing more
    assert capsys.readouterr().out == ""


def test_the_time_left_counts_down_while_a_cell_runs(tmp_path, capsys, monkeypatch):
    path = small_notebook(tmp_path / "notebooks" / "01_lesson.ipynb", "import time; time.sleep(600)")
    key = "notebooks/01_lesson"
    progress = notebooks.BuildProgress([path], {key: {"seconds": 400.0, "cells": {"1": 300.0, "2": 100.0}}},
                                       live=False, every=0.0)
    clock = [1000.0]
    monkeypatch.setattr(notebooks.time, "perf_counter", lambda: clock[0])
    progress.start(path)
    capsys.readouterr()
    readings = []
    for spent in (0, 120, 290, 500):  # seconds into cell 1, measured at 300 s last time
        clock[0] = 1000.0 + spent
        progress.tick()
        readings.append(capsys.readouterr().out.split("about ")[1].split(" left")[0])
    assert readings == ["6:40", "4:40", "1:50", "1:40"]  # never below what the cells after it take


def test_the_time_left_follows_this_builds_pace(tmp_path, capsys, monkeypatch):
    """On a CPU slower than the measured build's, the estimate grows with what the finished cells
    took, so it does not fall to the last build's figure for the cells ahead and sit there while a
    long cell runs over. The pace is read each time a cell finishes."""
    path = small_notebook(tmp_path / "notebooks" / "01_lesson.ipynb", "x = 1")
    key = "notebooks/01_lesson"
    progress = notebooks.BuildProgress([path], {key: {"seconds": 400.0, "cells": {"1": 100.0, "2": 200.0, "3": 100.0}}},
                                       live=False, every=0.0)
    clock = [1000.0]
    monkeypatch.setattr(notebooks.time, "perf_counter", lambda: clock[0])
    progress.start(path)
    assert progress.pace(key) == 1.0  # nothing finished yet: the last build's figures as they are
    clock[0] = 1150.0
    progress.cell(path, 1, 150.0)  # 1.5x what it took last time
    assert progress.pace(key) == pytest.approx(1.5)
    assert progress.left_now(key, 1) == pytest.approx(450.0)  # 1.5 x (200 + 100)
    clock[0] = 1210.0  # 60 s into cell 2
    assert progress.left_now(key, 1) == pytest.approx(390.0)
    clock[0] = 1550.0  # 400 s into cell 2, past its 1.5 x 200: what the cell after it takes, at the pace
    assert progress.left_now(key, 1) == pytest.approx(150.0)
    progress.cell(path, 2, 1500.0)  # 5x: a pace past PACE_LIMITS is held at its bound
    assert progress.pace(key) == pytest.approx(notebooks.PACE_LIMITS[1])
    quick = notebooks.BuildProgress([path], {key: {"seconds": 12.0, "cells": {"1": 2.0, "2": 10.0}}}, live=False)
    quick.start(path)
    quick.cell(path, 1, 20.0)  # 10x, but over 2 s of the last build: too little to go by
    assert quick.pace(key) == 1.0


def test_a_kernel_is_shut_down_when_its_notebook_is_done(tmp_path):
    import psutil

    path = small_notebook(tmp_path / "notebooks" / "01_lesson.ipynb", "import os; print(os.getpid())")
    executed = notebooks.execute(path, timeout=120)
    pid = int(executed.cells[0].outputs[0]["text"])
    deadline = time.time() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
