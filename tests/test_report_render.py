"""The report's Markdown, CSV and self-contained HTML."""

import csv
import io
import re
from html.parser import HTMLParser

import pytest

from d2kbench.report import CellResult, PropertyVerdict, WorkloadScore, build_report, to_html, to_markdown, write_report
from d2kbench.report.build import ReportOptions
from d2kbench.report.tables import fmt

EVIL = "evil/<script>alert(1)</script>"
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")


def _cells():
    """Two models, all four configs, three tasks, two seeds; speedups chosen to give distinct numbers."""
    cells = []
    for m, model in enumerate(("openai/gpt-4.1", EVIL)):
        for c, config in enumerate(("none", "L1", "L1+L2", "L1+L2+L3")):
            for t, task in enumerate(("attn_decode", "moe_align", "rmsnorm")):
                for seed in (0, 1):
                    if (m + c + t + seed) % 5 == 0:
                        cells.append(CellResult(model, task, config, seed, False))
                        continue
                    speedup = 0.3 + 0.37 * (c + 1) * (t + 1) + 0.11 * seed + 0.05 * m
                    workloads = (WorkloadScore("small", speedup, expert_speedup=2.5 + t, speedup_vs_comparator=0.9,
                                               sol_fraction=0.4),
                                 WorkloadScore("large", speedup * 1.2, expert_speedup=3.0 + t,
                                               speedup_vs_comparator=1.1, sol_fraction=0.6))
                    cells.append(CellResult(model, task, config, seed, True, workloads,
                                            implementation_scores={"combined": 20.0 + 9 * c + 7 * t + seed}))
    return cells


def _verdicts():
    return [PropertyVerdict(EVIL, "moe_align", f"p{i}", "L1", source, (i + s) % 2 == 0)
            for i in range(3) for s, source in enumerate(("design", "none", "L1+L2+L3"))]


@pytest.fixture(scope="module")
def report():
    return build_report(_cells(), _verdicts(), ReportOptions(resamples=300))


@pytest.fixture(scope="module")
def written(report, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    write_report(report, out)
    return out


class _Visible(HTMLParser):
    """Text of an HTML page outside <style>, plus every attribute (name, value) pair."""

    def __init__(self):
        super().__init__()
        self.text, self.attributes, self.tags, self._in_style = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += attrs
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False if tag == "style" else self._in_style

    def handle_data(self, data):
        if not self._in_style:
            self.text.append(data)


def _parse(html):
    parser = _Visible()
    parser.feed(html)
    return parser


def _csv_numbers(folder):
    return {n for path in folder.glob("csv/*.csv") for n in NUMBER.findall(path.read_text())}


def _missing_numbers(html, folder):
    return {n for n in NUMBER.findall(" ".join(_parse(html).text))} - _csv_numbers(folder)


def test_every_number_in_the_html_is_in_the_csv(written):
    html = (written / "report.html").read_text()
    shown = set(NUMBER.findall(" ".join(_parse(html).text)))
    assert len(shown) > 50  # the check covers the tables and the plots' labels and tooltips
    assert _missing_numbers(html, written) == set()
    # and the check can fail
    assert _missing_numbers(html.replace("</body>", "<p>12.3456</p></body>"), written) == {"12.3456"}


def test_html_is_self_contained(report, written):
    html = (written / "report.html").read_text()
    parsed = _parse(html)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(parsed.tags)
    for name, value in parsed.attributes:
        assert name not in ("src", "href", "xlink:href"), (name, value)
    assert not re.search(r"https?://|url\(|@import", html)
    assert parsed.tags.count("svg") == len(report.plots) >= 4


def test_html_escapes_model_names(report):
    html = to_html(report)
    assert "<script" not in html
    assert "evil/&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert EVIL in " ".join(_parse(html).text)


def test_floor_is_printed_with_the_score(report):
    assert report.table("settings").rows[0] == ("floor", "0.100")
    summary = report.table("summary")
    assert {row[summary.columns.index("floor")] for row in summary.rows} == {"0.100"}
    assert "performance score" in summary.columns


def test_plots_cover_every_required_kind(report):
    names = [p.name for p in report.plots]
    assert [n for n in names if n.startswith("paired-")] == ["paired-L1", "paired-L1+L2", "paired-L1+L2+L3"]
    assert "layer-stacking" in names and "fast-p" in names
    assert sorted(n for n in names if n.startswith("tasks-")) == sorted(f"tasks-{m}" for m in ("openai/gpt-4.1", EVIL))
    paired = next(p for p in report.plots if p.name == "paired-L1")
    assert paired.svg.count("<circle") == 2 * 3  # one point per model and task
    bars = next(p for p in report.plots if p.name == "tasks-openai/gpt-4.1")
    assert bars.svg.count("<rect") - 1 - 5 == 3 * 5  # minus frame and legend: 3 tasks x (4 configs + expert)


def test_csv_and_markdown_hold_the_same_rows(report, written):
    for table in report.tables:
        rows = list(csv.reader(io.StringIO((written / "csv" / f"{table.name}.csv").read_text())))
        assert tuple(rows[0]) == table.columns
        assert [tuple(r) for r in rows[1:]] == list(table.rows)
    markdown = to_markdown(report)
    paired = report.table("paired")
    assert paired.title in markdown
    plain = [row for row in paired.rows if row[0] == "openai/gpt-4.1"]
    assert plain and all("| " + " | ".join(row) + " |" in markdown for row in plain)
    assert "<script" not in markdown and "evil/&lt;script&gt;" in markdown


def test_tables_hold_the_metrics(report):
    paired = report.table("paired")
    assert len(paired.rows) == 2 * 3  # two models x three guided configs
    stacking = report.table("layer_stacking")
    assert stacking.columns[2:] == ("none", "L1", "L1+L2", "L1+L2+L3")
    tasks = report.table("tasks")
    assert len(tasks.rows) == 2 * 4 * 3
    row = dict(zip(tasks.columns, tasks.rows[0], strict=True))
    assert row["expert speedup"] == f"{(2.5 * 3.0) ** 0.5:.3f}"  # attn_decode: geomean of 2.5 and 3.0
    assert {r[0] for r in report.table("crosstab").rows} == {"L1", "L2", "L3", "all"}
    assert report.table("rank_agreement").rows


def test_write_report_files(written):
    assert (written / "report.md").read_text().startswith("# D2K-Bench report")
    assert {p.stem for p in (written / "csv").glob("*.csv")} >= {"settings", "summary", "paired", "layer_stacking",
                                                                  "tasks", "fast_p", "plot_axes"}


def test_number_format():
    assert [fmt(v) for v in (None, True, 3, 1.23456, -0.5, 0.000412, 0.0)] == \
        ["-", "yes", "3", "1.235", "-0.500", "0.000412", "0.000"]


def test_a_report_needs_cells():
    with pytest.raises(ValueError, match="no cells"):
        build_report([])
