"""Which profile a session runs when none is named, and setup() saying why."""

import pytest

from ftcourse import config, session


def test_the_variable_wins_then_a_checkout_runs_offline(monkeypatch):
    assert config.choose_profile({"FTCOURSE_PROFILE": "paper"}) == ("paper", "FTCOURSE_PROFILE is set")
    assert config.in_checkout()  # the tests run from the checkout
    assert config.choose_profile({}, gpu="Tesla T4") == ("offline", "the default in a checkout of the course")


def test_a_fresh_runtime_picks_by_its_gpu(monkeypatch):
    monkeypatch.setattr(config, "in_checkout", lambda: False)
    name, reason = config.choose_profile({}, gpu="Tesla T4")
    assert name == "paper" and "Tesla T4" in reason
    name, reason = config.choose_profile({}, gpu=None)
    assert name == "laptop" and "no GPU" in reason


def test_setup_says_which_profile_and_why(monkeypatch, capsys):
    monkeypatch.setenv("FTCOURSE_PROFILE", "smoke")
    profile = session.setup()
    assert profile.name == "smoke"
    printed = capsys.readouterr().out
    assert printed.startswith("profile: smoke (") and "  chosen because: FTCOURSE_PROFILE is set" in printed
    session.setup("offline", verbose=False)
    assert config.get_profile().name == "offline"


def test_helpers_use_the_session_profile_and_say_when_there_is_none():
    session.setup("smoke", verbose=False)
    assert config.get_profile().name == "smoke"
    config.activate(None)
    with pytest.raises(config.ConfigError, match=r"ftcourse\.setup\(\).*profile="):
        config.get_profile()
    assert config.get_profile("paper").name == "paper"  # a named profile needs no session


def test_setup_alone_reads_the_profile_from_the_environment(monkeypatch):
    monkeypatch.setenv("FTCOURSE_PROFILE", "smoke")
    assert config.get_profile().name != "smoke"  # the session's, chosen before the variable changed
    assert session.setup(verbose=False).name == "smoke"
    profile, reason = config.profile_from_environment({"FTCOURSE_PROFILE": "paper", "FTCOURSE_SENTENCE": "/x"})
    assert (profile.name, profile.sentence, reason) == ("paper", "/x", "FTCOURSE_PROFILE is set")
    assert config.PROFILES["paper"].sentence != "/x"  # the built-in profile is left as it is
