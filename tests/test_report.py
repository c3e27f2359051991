import math

import nbformat
import pytest

from ftcourse import report


def _headline():
    return report.headline("02", "Lesson 2: which layer to read", "offline",
                           [("second-to-last, F1", 74.0, 95.6), ("frozen parameters", 258), report.Figure("x", "yes")],
                           verdicts=["second-to-last beats last: yes"])


def test_headline_displays_as_text_html_and_json():
    bundle = _headline()._repr_mimebundle_()
    assert "second-to-last beats last: yes" in bundle["text/plain"]
    assert "<table>" in bundle["text/html"] and "<b>74.0</b>" in bundle["text/html"]
    figures = bundle[report.HEADLINE_MIME]["figures"]
    assert figures[0] == {"name": "second-to-last, F1", "measured": 74.0, "published": 95.6, "unit": "", "note": ""}
    assert figures[1]["published"] is None


def test_headlines_are_read_back_from_an_executed_notebook():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("headline")
    cell.outputs = [nbformat.v4.new_output("execute_result", data=_headline()._repr_mimebundle_(), execution_count=1)]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell]
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)  # through JSON, as a saved notebook
    (found,) = report.headlines_in(nb)
    assert found["lesson"] == "02" and found["figures"][0]["measured"] == 74.0


def test_a_failed_measurement_is_refused():
    with pytest.raises(ValueError, match="rerun"):
        report.headline("01", "t", "offline", [("accuracy", math.nan)])


def test_a_table_shows_as_aligned_text_and_html():
    table = report.Table(["regime", "accuracy", "trainable"], [["frozen", 0.6721, 770], ["finetune", 0.8253, 22566146]],
                         formats={"accuracy": "{:.3f}"}, notes=["one seed"])
    text = str(table).splitlines()
    assert text[0].split() == ["regime", "accuracy", "trainable"]
    assert text[3] == "finetune     0.825  22,566,146"  # text left, numbers right-aligned
    assert text[-1] == "one seed"
    assert '<td style="text-align: right">22,566,146</td>' in table._repr_html_()
    assert table.to_frame()["trainable"].tolist() == [770, 22566146]  # the values, not their text


def test_a_table_refuses_ragged_rows_and_unknown_formats():
    with pytest.raises(ValueError, match="one value per column"):
        report.Table(["a", "b"], [[1]])
    with pytest.raises(ValueError, match="unknown columns"):
        report.Table(["a"], [[1]], formats={"b": "{:.1f}"})


def test_versus_and_verdicts():
    table = report.versus([("LoRA parameters", 294912, 294912), ("per task", 1.13, 1.13, "MiB"), ("head", 770, None)])
    assert "per task             1.13       1.13  MiB" in str(table)
    assert "—" in str(table)  # no published figure
    claims = report.verdicts([("second-to-last beats last", True, True), ("last beats embeddings", True, False)])
    assert [row[-1] for row in claims.rows] == ["agrees", "DISAGREES"]


def test_seed_table_summarises_each_setting_with_the_given_function():
    def summarize(values):
        return {"mean": sum(values) / len(values), "std": 0.5, "range": max(values) - min(values)}

    table = report.seed_table({"finetune": [0.8, 0.9], "lora": [0.7]}, summarize)
    assert table.rows[0][:4] == ["finetune", 0.8500000000000001, 0.5, 0.09999999999999998]
    assert "finetune  0.850  0.500  0.100  0.800 0.900" in str(table)
    with pytest.raises(ValueError, match="no runs"):
        report.seed_table({"frozen": []}, summarize)


def test_figures_given_to_two_decimals_print_as_given_even_after_arithmetic():
    gap = 87.44 - 86.62  # 0.8200000000000074 in floating point
    table = report.versus([("pooling gap", 1.61, gap, "points"), ("share", 0.2734, 0.27, "%"), ("F1", 79.46, 95.5)])
    text = str(table)
    assert "0.82" in text and "0.820" not in text
    assert "1.61" in text and "0.273" in text and "0.27 " in text
    assert "79.46" in text and "95.5" in text


def test_figure_table_lists_a_papers_figures_under_its_title():
    table = report.figure_table({"last": 94.9, "finetune": 96.4}, "Devlin et al. (2019)", "dev F1")
    assert str(table).splitlines()[0] == "Devlin et al. (2019)"
    assert table.rows == [["last", 94.9], ["finetune", 96.4]] and "96.4" in str(table)


def test_a_headline_shows_notes_only_when_a_figure_has_one():
    plain = report.headline("01", "t", "offline", [("accuracy", 0.8, 0.9, "acc")])
    assert "note" not in str(plain) and "<th>note</th>" not in plain._repr_html_()
    noted = report.headline("01", "t", "offline", [
        report.Figure("fine-tuned", 82.9, None, "accuracy x100", "paper: 93.5 on the GLUE test set, all 67k sentences")])
    assert "paper: 93.5 on the GLUE test set" in str(noted) and "<th>note</th>" in noted._repr_html_()
