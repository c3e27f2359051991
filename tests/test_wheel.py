"""The course outside a checkout: the wheel, installed into a fresh virtualenv elsewhere,
carries what the offline profile needs (the raw encoder as package data) and runs a lesson's
code path from there, as `pip install git+URL` does on a Colab runtime."""

import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from ftcourse.config import REPO_ROOT

pytestmark = pytest.mark.slow

LESSON_PATH = textwrap.dedent("""
    import sys, torch, ftcourse
    from ftcourse import config, heads, models
    checkout = sys.argv[1]
    assert not ftcourse.__file__.startswith(checkout), ftcourse.__file__
    assert not str(config.COURSE_ENCODER_DIR).startswith(checkout), config.COURSE_ENCODER_DIR
    profile = ftcourse.setup(verbose=False)
    # Lesson 1's composition on the raw encoder, read from the wheel's package data.
    tokenizer = models.load_tokenizer("raw_encoder", profile)
    encoder = models.load_raw_encoder(profile)
    batch = tokenizer(["a gripping, funny film", "a dull film"], return_tensors="pt", padding=True)
    model = heads.TaskModel(encoder, heads.SentenceClassifier(encoder.config.hidden_size, num_labels=2))
    with torch.inference_mode():
        logits = model(**batch)["logits"]
    print("installed at", ftcourse.__file__.split("site-packages")[1], "logits", tuple(logits.shape))
""")


def test_the_wheel_runs_a_lesson_from_a_fresh_virtualenv(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(REPO_ROOT)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("ftcourse-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    # The dependencies come from this environment (installing torch again would take minutes);
    # its editable ftcourse does not, because a .pth line adds a folder without running its .pth files.
    (site / "course-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True)
    run = subprocess.run([python, "-c", LESSON_PATH, str(REPO_ROOT)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
                              "FTCOURSE_PROFILE": "offline", "FTCOURSE_CACHE": str(tmp_path / "cache")})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "logits (2, 2)" in run.stdout
    assert (site / "ftcourse" / "encoders" / "ftcourse-bert-mini" / "model.safetensors").is_file()
