"""tools.choose_settings: how a setting is chosen from its validation scores."""

import pytest

from tools import choose_settings


def test_an_lr_is_the_best_and_epochs_the_fewest_within_one_standard_error():
    assert choose_settings.choose({1e-3: 0.81, 2e-3: 0.846, 4e-3: 0.845}) == 2e-3
    error = choose_settings.accuracy_error(0.880, 872)
    assert error == pytest.approx(0.011, abs=5e-4)
    assert choose_settings.choose({1: 0.846, 2: 0.876, 3: 0.880}, error) == 2  # 3's lead is under one SE
    assert choose_settings.choose({1: 0.846, 2: 0.850, 3: 0.880}, error) == 3  # 2 is more than one SE behind
    assert choose_settings.spearman_error_x100(60.2, 300) == pytest.approx(3.70, abs=0.01)


def test_an_unknown_sweep_is_named_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        choose_settings.main(["lora_rate"])
    assert "unknown sweep lora_rate; known: epochs, lora_lr" in capsys.readouterr().err
