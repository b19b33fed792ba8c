"""The report in one format: Markdown, LaTeX, CSV or HTML; every report's tables, then the verdicts, then the
sources of every cell."""

from __future__ import annotations

import csv
import html
import io

from modsar.errors import ModsarError
from modsar.report.build import Report
from modsar.report.tables import Styled, Table, sources_table


def render(reports: list[Report], fmt: str, headline: str = "ndcg@10") -> str:
    """Every report's tables, then the verdicts, then the sources of every cell."""
    tables = [t for r in reports for t in r.tables]
    verdicts = [v for r in reports for v in r.verdicts]
    sources = sources_table([r.cells for r in reports], headline)
    if fmt == "md":
        parts = (
            [_md(t) for t in tables]
            + (["## Verdict\n\n" + "\n".join(f"- {v}" for v in verdicts)] if verdicts else [])
            + [_md(sources)]
        )
        return "\n\n".join(parts) + "\n"
    if fmt == "latex":
        return (
            "\n\n".join(_latex(t) for t in tables)
            + "\n"
            + "".join(f"% {v}\n" for v in verdicts)
            + "\n"
            + _latex(sources)
            + "\n"
        )
    if fmt == "html":
        body = "\n".join(_html(t) for t in tables)
        items = "".join(f"<li>{html.escape(v)}</li>" for v in verdicts)
        return (
            f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>ModSAR report</title></head><body>\n'
            f"{body}\n<h2>Verdict</h2><ul>{items}</ul>\n{_html(sources)}\n</body></html>\n"
        )
    if fmt == "csv":
        return "\n".join(_csv(t) for t in [*tables, sources])
    raise ModsarError(f"unknown --format '{fmt}'; choose md, latex, csv or html")


def _flat_header(t: Table) -> list[str]:
    """One header row: two-row headers (space over AE/AR) are joined cell by cell."""
    if len(t.header) == 1:
        return t.header[0]
    return [f"{a} {b}".strip() for a, b in zip(t.header[0], t.header[1], strict=True)]


def _md(t: Table) -> str:
    def fmt(c: Styled) -> str:
        text = c.text
        if c.underline:
            text = f"<u>{text}</u>"
        return f"**{text}**" if c.bold else text

    header = _flat_header(t)
    lines = [f"## {t.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def _latex_escape(text: str) -> str:
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("±", r"$\pm$"),
        ("–", "--"),
    ):
        text = text.replace(a, b)
    return text


def _latex(t: Table) -> str:
    def fmt(c: Styled) -> str:
        text = _latex_escape(c.text)
        if c.underline:
            text = rf"\underline{{{text}}}"
        return rf"\textbf{{{text}}}" if c.bold else text

    ncols = len(t.rows[0]) if t.rows else len(t.header[0])
    lines = [f"% {t.title}", r"\begin{tabular}{" + "l" * 2 + "c" * (ncols - 2) + "}", r"\toprule"]
    for h in t.header:
        lines.append(" & ".join(_latex_escape(x) for x in h) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(fmt(c) for c in row) + r" \\" for row in t.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def _html(t: Table) -> str:
    def fmt(c: Styled) -> str:
        text = html.escape(c.text)
        if c.underline:
            text = f"<u>{text}</u>"
        return f"<b>{text}</b>" if c.bold else text

    head = "".join("<tr>" + "".join(f"<th>{html.escape(x)}</th>" for x in h) + "</tr>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{fmt(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    return (
        f"<h2>{html.escape(t.title)}</h2>\n"
        f'<table border="1"><thead>{head}</thead><tbody>{body}</tbody></table>'
    )


def _csv(t: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["table", *_flat_header(t)])
    for row in t.rows:
        writer.writerow([t.title, *[c.text for c in row]])
    return out.getvalue()
