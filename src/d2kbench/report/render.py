"""Writers: Markdown, one CSV per table, and one self-contained HTML file (inline CSS and SVG, no
scripts, no external references). All three lay out the same formatted strings of a `Report`."""

from __future__ import annotations

import csv
import io
from html import escape
from pathlib import Path

from d2kbench.report.build import Report
from d2kbench.report.tables import Table

DISCLAIMER = ("Measured on our hardware with our models and our agent harness; these are not the original study's "
              "numbers and are not comparable to them.")
CSV_ONLY = ("plot_axes",)
# Which plots (by name prefix) follow which table in the HTML.
PLOTS_AFTER = {"paired": "paired-", "layer_stacking": "layer-stacking", "fast_p": "fast-p", "tasks": "tasks-"}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; }
th { background: #f2f2f2; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #555; font-size: 13px; max-width: 70em; }
figure { margin: 0 0 2em; }
svg.plot { background: #fff; }
.disclaimer { background: #fff6dd; padding: 0.5em 1em; border-left: 4px solid #e0b000; }
"""


def to_csv(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return out.getvalue()


def _md_cell(text: str) -> str:
    """Table-cell text that a Markdown renderer shows as written: HTML escaped, pipes escaped."""
    return escape(text, quote=False).replace("|", "\\|")


def to_markdown(report: Report) -> str:
    lines = [f"# {_md_cell(report.title)}", "", DISCLAIMER, ""]
    for table in report.tables:
        if table.name in CSV_ONLY:
            continue
        lines += [f"## {table.title}", ""]
        if table.note:
            lines += [table.note, ""]
        lines.append("| " + " | ".join(_md_cell(c) for c in table.columns) + " |")
        lines.append("|" + "---|" * len(table.columns))
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
        lines.append("")
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    body = "\n".join(
        "<tr>" + "".join(f'<td class="num">{escape(c)}</td>' if _is_number(c) else f"<td>{escape(c)}</td>"
                         for c in row) + "</tr>"
        for row in table.rows)
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (f'<section id="table-{escape(table.name)}"><h2>{escape(table.title)}</h2>{note}\n'
            f"<table><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></section>")


def to_html(report: Report) -> str:
    parts = []
    for table in report.tables:
        if table.name in CSV_ONLY:
            continue
        parts.append(_html_table(table))
        prefix = PLOTS_AFTER.get(table.name)
        parts += [f"<figure>{p.svg}</figure>" for p in report.plots if prefix and p.name.startswith(prefix)]
    title = escape(report.title)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>\n'
            f"<style>{STYLE}</style></head>\n<body>\n<h1>{title}</h1>\n"
            f'<p class="disclaimer">{escape(DISCLAIMER)}</p>\n' + "\n".join(parts) + "\n</body></html>\n")


def write_report(report: Report, out: Path | str) -> list[Path]:
    """Write report.md, report.html and csv/<table>.csv under `out`; returns the paths written."""
    out = Path(out)
    (out / "csv").mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("report.md", to_markdown(report)), ("report.html", to_html(report))):
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    for table in report.tables:
        path = out / "csv" / f"{table.name}.csv"
        path.write_text(to_csv(table), encoding="utf-8")
        written.append(path)
    return written
