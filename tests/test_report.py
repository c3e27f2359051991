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
