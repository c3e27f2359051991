"""Results that display as tables, and each lesson's headline figures in a form machines read.

``Table`` is what a lesson cell returns instead of hand-aligned prints: an HTML table in
Jupyter and on the course site, aligned text in a terminal and to nbval. ``versus`` puts a
run's figures beside the published ones; ``verdicts`` checks a paper's claims on the run.

A lesson's closing cell calls ``headline(...)``. In Jupyter (and on the course site) it shows
as an HTML table; in a terminal, and to nbval, as aligned text. Its output also carries the
figures as JSON under ``HEADLINE_MIME``, so the site build (``ftcourse.course.site``) and anyone else
can read what an executed notebook measured without parsing prose.

Published figures come from ``ftcourse.published``; measured ones from the run. A row keeps
the two in separate fields, so they are never mixed.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import asdict, dataclass, field

HEADLINE_MIME = "application/vnd.ftcourse.headline+json"


@dataclass
class Table:
    """Rows under named columns. Text cells are left-aligned, numbers right-aligned; a number is
    formatted by the column's format string (``formats``, e.g. ``{"accuracy": "{:.3f}"}``),
    else by ``format_figure``. ``None`` shows as a dash. ``notes`` are lines printed under the table."""

    columns: list[str]
    rows: list[list]
    title: str = ""
    formats: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.columns, self.rows = list(self.columns), [list(row) for row in self.rows]
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"A row has {len(row)} cells for {len(self.columns)} columns {self.columns}: {row}. "
                                 "Fix: give one value per column (None for a missing one).")
        unknown = set(self.formats) - set(self.columns)
        if unknown:
            raise ValueError(f"Formats for unknown columns {sorted(unknown)}; the columns are {self.columns}.")

    def cell(self, value, column: str) -> str:
        if value is None or isinstance(value, str) or column not in self.formats:
            return format_figure(value)
        return self.formats[column].format(value)

    def _text_rows(self) -> list[list[str]]:
        return [[self.cell(v, c) for v, c in zip(row, self.columns)] for row in self.rows]

    def _numeric(self) -> list[bool]:
        """Columns whose values are all numbers (or missing): right-aligned."""
        def number(value):
            if isinstance(value, str):  # a figure already formatted by the caller: "0.27%", "1,024"
                return bool(re.fullmatch(r"[-+]?[\d,]*\.?\d+%?|—", value.strip()))
            return value is None or isinstance(value, (int, float)) and not isinstance(value, bool)

        return [all(number(row[i]) for row in self.rows) for i in range(len(self.columns))]

    def __str__(self) -> str:
        rows = [self.columns] + self._text_rows()
        widths = [max(len(row[i]) for row in rows) for i in range(len(self.columns))]
        right = self._numeric()
        lines = [self.title] if self.title else []
        for k, row in enumerate(rows):
            lines.append("  ".join(c.rjust(w) if right[i] else c.ljust(w)
                                   for i, (c, w) in enumerate(zip(row, widths))).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines + self.notes)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        right = self._numeric()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f'<td style="text-align: {"right" if right[i] else "left"}">'
                                        f"{html.escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                       for row in self._text_rows())
        title = f"<p><b>{html.escape(self.title)}</b></p>" if self.title else ""
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        return (f'<div class="ftcourse-table">{title}<table><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>{notes}</div>")

    def to_frame(self):
        """The values (not their text) as a pandas DataFrame, to compute on."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns)


def versus(rows, title: str = "", against: str = "published") -> Table:
    """A run's figures beside the published ones: ``rows`` are ``(quantity, measured,
    published)`` or ``(quantity, measured, published, unit)``; published is ``None`` where
    no paper gives the figure. ``against="derived"`` heads the column for the course's own
    arithmetic (``ftcourse.derived``) instead: a paper's figure and the course's are never
    under one name."""
    if against not in ("published", "derived"):
        raise ValueError(f"against must be 'published' (a paper's figure) or 'derived' (the course's arithmetic), "
                         f"not {against!r}.")
    rows = [list(row) + [""] * (4 - len(row)) for row in rows]
    return Table(["quantity", "measured", against, "unit"], rows, title)


def figure_table(figures: dict, title: str = "", column: str = "published", fmt: str = "{:.1f}") -> Table:
    """Named figures (a paper's, from ``ftcourse.published``), one row each, under ``title``."""
    return Table(["", column], [[name, value] for name, value in figures.items()], title, formats={column: fmt})


def verdicts(claims, title: str = "") -> Table:
    """A paper's claims checked on this run: ``claims`` are ``(claim, paper_says, run_says)``
    with two booleans. Each row says whether the run agrees."""
    yes = {True: "yes", False: "no"}
    rows = [[claim, yes[bool(paper)], yes[bool(run)], "agrees" if bool(paper) == bool(run) else "DISAGREES"]
            for claim, paper, run in claims]
    return Table(["claim", "paper", "this run", "verdict"], rows, title)


def seed_table(accuracies: dict, summarize, title: str = "") -> Table:
    """One row per setting: its runs' accuracies over seeds, summarised by ``summarize`` (a
    function returning ``mean``, ``std`` and ``range``, as the exercise asks students to write)."""
    rows = []
    for name, values in accuracies.items():
        if not values:
            raise ValueError(f"{name!r} has no runs to summarise. Fix: run it for at least one seed.")
        stats = summarize(values)
        rows.append([name, stats["mean"], stats["std"], stats["range"], " ".join(f"{v:.3f}" for v in values)])
    return Table(["", "mean", "std", "range", "runs"], rows, title,
                 formats={"mean": "{:.3f}", "std": "{:.3f}", "range": "{:.3f}"})


def against_first(runs: dict, header: str, notes=()) -> Table:
    """``name -> (accuracy, seconds per epoch)`` as a table, each row also against the first:
    accuracy in points, time as a ratio (what each change buys, lesson 1)."""
    (first_accuracy, first_seconds), *_ = runs.values()
    return Table([header, "dev accuracy", "points", "s/epoch", "x first"],
                 [[name, acc, 100 * (acc - first_accuracy), sec, sec / first_seconds] for name, (acc, sec) in runs.items()],
                 formats={"dev accuracy": "{:.3f}", "points": "{:+.1f}", "s/epoch": "{:.2f}", "x first": "{:.2f}"},
                 notes=list(notes))


@dataclass
class Figure:
    """One headline figure: what it is, what the paper published (or ``None``), what this
    run measured, and the unit both are in. ``published`` holds a paper's figure only when it
    was measured on the same split and task setup as this run; otherwise it stays ``None`` and
    ``note`` says what the paper found and what differs (or gives the course's derived figure)."""

    name: str
    measured: float | int | str | None
    published: float | int | str | None = None
    unit: str = ""
    note: str = ""


@dataclass
class Headline:
    """A lesson's headline: its figures and the conclusions computed from them."""

    lesson: str
    title: str
    profile: str
    figures: list[Figure] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def _with_notes(self) -> bool:
        return any(f.note for f in self.figures)

    def __str__(self) -> str:
        notes = self._with_notes()
        rows = [("figure", "published", "measured", "unit") + (("note",) if notes else ())]
        rows += [(f.name, format_figure(f.published), format_figure(f.measured), f.unit) + ((f.note,) if notes else ())
                 for f in self.figures]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [f"{self.title} (profile: {self.profile})"]
        for k, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(w) if i in (0, 3, 4) else cell.rjust(w)
                                   for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
            if k == 0:
                lines.append("-" * len(lines[-1]))
        lines += [f"- {verdict}" for verdict in self.verdicts]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        notes = self._with_notes()
        body = "".join(
            f"<tr><td>{html.escape(f.name)}</td><td>{html.escape(format_figure(f.published))}</td>"
            f"<td><b>{html.escape(format_figure(f.measured))}</b></td><td>{html.escape(f.unit)}</td>"
            + (f"<td>{html.escape(f.note)}</td>" if notes else "") + "</tr>"
            for f in self.figures)
        verdicts = "".join(f"<li>{html.escape(v)}</li>" for v in self.verdicts)
        return (f'<div class="ftcourse-headline"><p><b>{html.escape(self.title)}</b> '
                f"(profile: {html.escape(self.profile)})</p>"
                "<table><thead><tr><th>figure</th><th>published</th><th>measured</th><th>unit</th>"
                + ("<th>note</th>" if notes else "") + "</tr></thead>"
                f"<tbody>{body}</tbody></table>" + (f"<ul>{verdicts}</ul>" if verdicts else "") + "</div>")

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": str(self), "text/html": self._repr_html_(),
                HEADLINE_MIME: json.loads(json.dumps(self.as_dict(), default=_jsonable))}


def headline(lesson: str, title: str, profile, figures, verdicts=()) -> Headline:
    """A lesson's headline. ``figures`` are ``Figure``s or ``(name, measured, published, unit)``
    tuples (the last two optional); ``profile`` is a ``Profile`` or its name."""
    made = [f if isinstance(f, Figure) else Figure(*f) for f in figures]
    for figure in made:
        if isinstance(figure.measured, float) and not math.isfinite(figure.measured):
            raise ValueError(f"The measured figure {figure.name!r} is {figure.measured}: a run failed. "
                             "Fix: rerun the lesson from the top and check the cell that measured it.")
    return Headline(lesson, title, getattr(profile, "name", str(profile)), made, list(verdicts))


def headlines_in(notebook) -> list[dict]:
    """The headlines recorded in an executed notebook (an ``nbformat`` node or a path)."""
    import nbformat

    if not hasattr(notebook, "cells"):
        notebook = nbformat.read(notebook, as_version=4)
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if HEADLINE_MIME in data:
                value = data[HEADLINE_MIME]
                found.append(json.loads(value) if isinstance(value, str) else dict(value))
    return found


def format_figure(value) -> str:
    """A figure as the lessons print it: integers with separators, fractions to three places,
    scores to one, a figure given to two decimals as given; ``None`` as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        two = round(value, 2)
        # A figure given to two decimals: 0.27 (%), 1.13 (MiB), or a difference of two of them
        # (87.44 - 86.62 is 0.8200000000000074 in floating point).
        if abs(value - two) < 1e-9 and (abs(value) < 1 or two != round(value, 1)):
            return f"{two:,.2f}"
        return f"{value:,.3f}" if abs(value) < 1 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _jsonable(value):
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    return str(value)
