"""Metrics and the report: pure functions over plain records (`CellResult`, `PropertyVerdict`).

`build_report(cells)` computes every table and plot; `write_report(report, out)` writes Markdown,
CSV and one self-contained HTML file. docs/metrics.md defines every metric.
"""

from d2kbench.report.build import Report, ReportOptions, build_report
from d2kbench.report.records import CONFIGS, CellResult, PropertyVerdict, WorkloadScore
from d2kbench.report.render import to_csv, to_html, to_markdown, write_report

__all__ = ["CONFIGS", "CellResult", "PropertyVerdict", "Report", "ReportOptions", "WorkloadScore", "build_report",
           "to_csv", "to_html", "to_markdown", "write_report"]
