"""Results that display as tables, and each lesson's headline figures in a form machines read.

A lesson's closing cell calls ``headline(...)``. In Jupyter (and on the course site) it shows
as an HTML table; in a terminal, and to nbval, as aligned text. Its output also carries the
figures as JSON under ``HEADLINE_MIME``, so the site build (``ftcourse.site``) and anyone else
can read what an executed notebook measured without parsing prose.

Published figures come from ``ftcourse.published``; measured ones from the run. A row keeps
the two in separate fields, so they are never mixed.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass, field

HEADLINE_MIME = "application/vnd.ftcourse.headline+json"


@dataclass
class Figure:
    """One headline figure: what it is, what the paper published (or ``None``), what this
    run measured, and the unit both are in."""

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

    def __str__(self) -> str:
        rows = [("figure", "published", "measured", "unit")]
        rows += [(f.name, _fmt(f.published), _fmt(f.measured), f.unit) for f in self.figures]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [f"{self.title} (profile: {self.profile})"]
        for k, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(w) if i in (0, 3) else cell.rjust(w)
                                   for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
            if k == 0:
                lines.append("-" * len(lines[-1]))
        lines += [f"- {verdict}" for verdict in self.verdicts]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<tr><td>{html.escape(f.name)}</td><td>{html.escape(_fmt(f.published))}</td>"
            f"<td><b>{html.escape(_fmt(f.measured))}</b></td><td>{html.escape(f.unit)}</td></tr>"
            for f in self.figures)
        verdicts = "".join(f"<li>{html.escape(v)}</li>" for v in self.verdicts)
        return (f'<div class="ftcourse-headline"><p><b>{html.escape(self.title)}</b> '
                f"(profile: {html.escape(self.profile)})</p>"
                "<table><thead><tr><th>figure</th><th>published</th><th>measured</th><th>unit</th></tr></thead>"
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


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _jsonable(value):
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    return str(value)
