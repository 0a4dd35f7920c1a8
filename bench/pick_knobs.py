"""Decide an expert's knobs from `bench/sweep.py` files, by the rule the perf notes state, and optionally set them.

    PYTHONPATH=src python3 bench/pick_knobs.py SWEEP_JSON[:KNOB,KNOB...] ... [--apply] [--markdown FILE]

Each sweep file decides the knobs it swept (or only those named after its colon, for a sweep that timed one workload
of several: the named knobs must touch that workload alone). The files are taken in turn, each against the expert as
the earlier ones left it: the baseline is the swept variant whose knobs all hold the expert's current values, and
a candidate is one that differs from it only in the knobs being decided. A candidate wins when it was right and timed
on every workload of the sweep, beat the baseline on at least one workload and lost on none, where beating (losing)
is either of:
- its median below (above) the baseline's by more than the baseline's rounds spread ((max - min) / median of its
  batches) in one run (a workload and seed);
- round by round (each round's batches adjacent in time, in balanced orders, so that round i of one variant pairs
  with round i of the other): over at least PAIRED_MIN_ROUNDS rounds of a workload (its seeds pooled), faster
  (slower) in at least PAIRED_SHARE of them, the median ratio beyond PAIRED_MIN_GAIN. A gain of a few percent on a
  4-5 us graph replay never clears the whole spread (single rounds set it) however often it repeats; with no real
  difference, 15 or more of 20 rounds faster happen with chance 2% (ties count as neither side).
Of the winners, the one with the smallest geometric mean of its times over the baseline's is taken; with no winner
the knobs stay. A sweep cut off before its last workload (`"complete": false`) decides nothing.

With --apply the decisions are written into the task's expert.py (the same one-line rewrite the sweep timed), so a
GPU call can sweep, decide and run the suite bench on the decided expert without waiting on a person, and the same
command run here on the returned files makes the same tree to commit.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import knob_assignment, variant_source  # noqa: E402

from d2kbench.suite import find_task  # noqa: E402

PAIRED_MIN_ROUNDS = 20
PAIRED_SHARE = 0.75
PAIRED_MIN_GAIN = 0.01


def paired_side(ratios: list[float]) -> int:
    """-1 where the candidate is faster round by round (per the module's rule), +1 where slower, 0 otherwise."""
    if len(ratios) < PAIRED_MIN_ROUNDS:
        return 0
    median = statistics.median(ratios)
    if sum(r < 1 for r in ratios) >= PAIRED_SHARE * len(ratios) and median < 1 - PAIRED_MIN_GAIN:
        return -1
    if sum(r > 1 for r in ratios) >= PAIRED_SHARE * len(ratios) and median > 1 + PAIRED_MIN_GAIN:
        return 1
    return 0


@dataclass
class Verdict:
    label: str
    knobs: dict
    ratios: dict          # (workload, seed) -> candidate median / baseline median
    wins: bool
    why: str


def current_value(source: str, name: str):
    """The literal a knob is assigned in the expert's source (one line, as `variant_source` requires)."""
    _, line = knob_assignment(source, name)
    return ast.literal_eval(ast.parse(line).body[0].value)


def judge(records: list[dict], decide: list[str], current: dict) -> tuple[dict | None, list[Verdict]]:
    """The baseline record set (by workload) and a verdict for each candidate, per the module's rule."""
    swept = set(current)
    by_label: dict[str, dict] = {}
    for r in records:
        if r["variant"] in ("reference", "comparator"):
            continue
        by_label.setdefault(r["variant"], {})[(r["workload"], r["seed"])] = r
    runs = sorted({run for entries in by_label.values() for run in entries})

    def knobs_of(entries: dict) -> dict | None:
        timed = [r for r in entries.values() if r.get("knobs")]
        return timed[0]["knobs"] if timed else None

    baseline = next((e for e in by_label.values() if knobs_of(e) == current), None)
    if baseline is None or any(run not in baseline or baseline[run]["us"] is None for run in runs):
        return None, []
    verdicts = []
    for label, entries in by_label.items():
        knobs = knobs_of(entries)
        if entries is baseline or knobs is None:
            continue
        if any(knobs[k] != current[k] for k in swept - set(decide)):
            continue  # differs in a knob this file does not decide
        if any(run not in entries or entries[run]["us"] is None for run in runs):
            wrong = next((e.get("wrong") for e in entries.values() if e.get("wrong")), "not timed everywhere")
            verdicts.append(Verdict(label, knobs, {}, False, f"wrong or untimed: {wrong}"))
            continue
        ratios, gains, losses = {}, [], []
        rounds: dict[str, list[float]] = {}  # per workload, its seeds pooled: candidate / baseline, round by round
        for run in runs:
            base = baseline[run]
            spread = (max(base["rounds_us"]) - min(base["rounds_us"])) / base["us"]
            ratios[run] = entries[run]["us"] / base["us"]
            if ratios[run] < 1 - spread:
                gains.append(f"{run[0]} (beyond the spread)")
            elif ratios[run] > 1 + spread:
                losses.append(f"{run[0]} (beyond the spread)")
            rounds.setdefault(run[0], []).extend(
                c / b for c, b in zip(entries[run]["rounds_us"], base["rounds_us"], strict=True))
        for workload, paired in rounds.items():
            side = paired_side(paired)
            if side < 0:
                gains.append(f"{workload} (round by round: faster in {sum(r < 1 for r in paired)} of {len(paired)})")
            elif side > 0:
                losses.append(f"{workload} (round by round: slower in {sum(r > 1 for r in paired)} of {len(paired)})")
        wins = bool(gains) and not losses
        why = (f"loses on {', '.join(losses)}" if losses
               else f"gains on {', '.join(gains)}" if gains else "within the spread everywhere")
        verdicts.append(Verdict(label, knobs, ratios, wins, why))
    return baseline, verdicts


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def pick(spec: str, sweep: dict, source: str) -> tuple[str, dict, list[str]]:
    """One sweep file's decision (`spec`: its path and the knobs it decides; `sweep`: its records) against `source`:
    the new source, the knobs changed and a Markdown account."""
    path, _, names = spec.partition(":")
    if sweep.get("complete") is False:  # cut off (files written before the key existed are whole)
        runs = len({(r["workload"], r.get("seed")) for r in sweep["records"]})
        return source, {}, [f"### {path}\n\ncut off after {runs} run(s) of its workloads: nothing decided\n"]
    swept = next((r["knobs"] for r in sweep["records"] if r.get("knobs")), None)
    if swept is None:
        return source, {}, [f"### {path}\n\nno variant was timed: nothing decided\n"]
    decide = names.split(",") if names else list(swept)
    unknown = set(decide) - set(swept)
    if unknown:
        raise ValueError(f"{path} did not sweep {', '.join(sorted(unknown))}")
    if any(len(r.get("rounds_us") or ()) < 2 for r in sweep["records"] if r.get("us") is not None):
        raise ValueError(f"{path}: a timed record has fewer than two rounds, no spread to judge by (--rounds 2+)")
    current = {k: current_value(source, k) for k in swept}
    baseline, verdicts = judge(sweep["records"], decide, current)
    lines = [f"### {path} (deciding {', '.join(decide)})\n"]
    if baseline is None:
        lines.append(f"no timed variant holds the expert's current values {current}: nothing decided\n")
        return source, {}, lines
    lines.append("| candidate | geomean time / baseline | verdict |\n|---|---|---|")
    for v in verdicts:
        mean = f"{geomean(v.ratios.values()):.3f}" if v.ratios else "-"
        lines.append(f"| {v.label} | {mean} | {'wins' if v.wins else 'no'}: {v.why} |")
    winners = [v for v in verdicts if v.wins]
    if not winners:
        lines.append("\nno candidate wins: the knobs stay\n")
        return source, {}, lines
    best = min(winners, key=lambda v: geomean(v.ratios.values()))
    changed = {k: best.knobs[k] for k in decide if best.knobs[k] != current[k]}
    lines.append(f"\ntaken: {best.label} ({', '.join(f'{k} = {v!r}' for k, v in changed.items())})\n")
    return variant_source(source, changed), changed, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="+", metavar="SWEEP_JSON[:KNOB,...]")
    parser.add_argument("--apply", action="store_true", help="write the decisions into the task's expert.py")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--diff", type=Path, help="write what --apply changed, as a unified diff")
    args = parser.parse_args()

    sweeps = {spec: json.loads(Path(spec.partition(":")[0]).read_text()) for spec in args.sweeps}
    report, diff = ["# Knobs decided from sweeps\n"], []
    for task_id in sorted({sweep["task"] for sweep in sweeps.values()}):
        expert_path = find_task(task_id).expert_path
        source = committed = expert_path.read_text()
        changed: dict = {}
        for spec, sweep in sweeps.items():
            if sweep["task"] != task_id:
                continue
            try:
                source, now, lines = pick(spec, sweep, source)
            except ValueError as exc:
                parser.error(str(exc))
            changed.update(now)
            report += lines
        report.append(f"**{task_id}**: " + (", ".join(f"{k} = {v!r}" for k, v in changed.items()) or "unchanged")
                      + ("" if args.apply or not changed else " (not applied)") + "\n")
        if args.apply and changed:
            expert_path.write_text(source)
            diff += difflib.unified_diff(committed.splitlines(keepends=True), source.splitlines(keepends=True),
                                         str(expert_path), str(expert_path))
    text = "\n".join(report)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.diff:
        args.diff.write_text("".join(diff))
    return 0


if __name__ == "__main__":
    sys.exit(main())
