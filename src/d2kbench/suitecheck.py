"""`d2k suite check` and `d2k suite bench`: the experts, evaluated as candidates."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from d2kbench.evaluate.evaluator import EvalOptions, evaluate, resolve_device
from d2kbench.evaluate.report import format_result
from d2kbench.evaluate.result import EvalResult
from d2kbench.suite import Task, find_task, load_suite


def _select(ids: list[str] | None) -> list[Task]:
    """The named tasks (loading only those), or the whole suite."""
    return [find_task(i) for i in ids] if ids else list(load_suite())


def check_suite(ids: list[str] | None, device: str = "auto", out: Path | None = None, as_json: bool = False) -> int:
    """Evaluate every expert for correctness: the scored and hidden workloads on a GPU, the cpu ones otherwise."""
    device = resolve_device(device)
    gpu = device.startswith("cuda")
    results: list[EvalResult] = []
    for task in _select(ids):
        names = None
        if gpu:
            names = tuple(w.name for w in task.workloads if w.split != "cpu")
        result = evaluate(task, task.expert_path, EvalOptions(workloads=names, time=False, device=device))
        results.append(result)
        if not as_json:
            print(format_result(result), flush=True)
    failed = [r.task for r in results if not r.correct]
    summary = {"device": device, "passed": len(results) - len(failed), "failed": failed,
               "results": [r.to_json() for r in results]}
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"suite check: {summary['passed']} of {len(results)} experts pass" +
              (f"; failing: {', '.join(failed)}" if failed else ""))
    if out:
        _write(out, "check", summary, _check_markdown(summary))
    return 0 if not failed else 1


def _check_markdown(summary: dict) -> str:
    rows = ["| task | verdict | workloads | detail |", "|---|---|---|---|"]
    for r in summary["results"]:
        names = ", ".join(f"{w['name']}{'' if w['correct'] else ' (FAIL)'}" for w in r["workloads"])
        rows.append(f"| {r['task']} | {r['verdict']} | {names} | {r['detail'] or ''} |")
    return f"# suite check on {summary['device']}\n\n" + "\n".join(rows) + "\n"


def bench_suite(ids: list[str] | None, device: str = "auto", out: Path | None = None) -> int:
    """GPU: per scored workload the reference, comparator and expert times, speedups, TB/s, TFLOP/s, SOL."""
    device = resolve_device(device)
    if not device.startswith("cuda"):
        print("d2k suite bench needs a GPU (no CUDA device visible)", file=sys.stderr)
        return 2
    results: list[dict] = []
    summary = {"device": device, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "environment": {},
               "results": results}
    for task in _select(ids):
        r = evaluate(task, task.expert_path, EvalOptions(comparator=True, reference_error=True, device=device))
        print(format_result(r), flush=True)
        results.append(r.to_json())
        summary["environment"] = results[0]["environment"]
        if out:  # after every task: a run cut short keeps what it measured
            _write(out, "bench", summary, _bench_markdown(summary))
    print(_bench_markdown(summary))
    return 0 if all(r["verdict"] == "pass" for r in results) else 1


def _bench_markdown(summary: dict) -> str:
    env = summary["environment"]
    head = (f"# suite bench, {env.get('gpu', '?')}, torch {env.get('torch')}, triton {env.get('triton')}, "
            f"{summary['date']}\n\nTimes are medians in microseconds (CUDA graph replay where the workload is "
            "latency-bound). Speedups are over the plain-PyTorch reference. Errors are against the oracle on "
            "one input set, per output: relative RMS error (fp8 codes: the share that differ), the expert's "
            "then the reference's.\n\n")
    rows = ["| task | workload | reference | comparator | expert | expert speedup | comparator speedup | "
            "expert vs comparator | TB/s | TFLOP/s | SOL | error expert / reference |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["results"]:
        if r["verdict"] != "pass":
            rows.append(f"| {r['task']} | - | {r['verdict']} ({r['reason']}): {r['detail'][:80]} ||||||||||")
            continue
        for w in r["workloads"]:
            t = {k: (v["graph_median_ms"] or v["median_ms"]) * 1e3 for k, v in w["timings"].items()}
            if not t:
                continue
            comp = t.get("comparator")
            errors = "; ".join(f"{k} {v:.2e} / {w['reference_error'][k]:.2e}" if k in w["reference_error"]
                               else f"{k} {v:.2e}" for k, v in w["error"].items())
            versus = (f"{comp:.1f} | {t['candidate']:.1f} | {w['speedup']:.2f}x | {t['reference'] / comp:.2f}x | "
                      f"{comp / t['candidate']:.2f}x" if comp else
                      f"- | {t['candidate']:.1f} | {w['speedup']:.2f}x | - | -")
            rows.append(f"| {r['task']} | {w['name']} | {t['reference']:.1f} | {versus} | {w['achieved_tbps']:.2f} | "
                        f"{w['achieved_tflops']:.1f} | {w['sol_fraction']:.0%} | {errors} |")
    return head + "\n".join(rows) + "\n" + _picks_markdown(summary)


def _picks_markdown(summary: dict) -> str:
    """The comparator's Inductor kernels: the configuration Inductor picked, the one kept, and the comparator's
    time with each configuration under the harness's timing (`evaluate/inductor_picks.py`)."""
    lines = []
    for r in summary["results"]:
        for w in r["workloads"]:
            for p in w.get("comparator_picks", []):
                times = ", ".join(f"{config} {ms * 1e3:.1f}" for config, ms in p["harness_ms"].items())
                kept = "the same" if p["kept"] == p["inductor_pick"] else f"kept {p['kept']}"
                detail = f"us: {times}" if times else p.get("note", "")
                lines.append(f"- {r['task']} {w['name']}: {p['kernel']} Inductor picked {p['inductor_pick']}, {kept}"
                             + (f" ({detail})" if detail else ""))
    if not lines:
        return ""
    return ("\nThe comparator's Inductor kernels: Inductor's pick kept unless another configuration's every batch of "
            "the whole comparator beat every batch of it (us: medians):\n\n" + "\n".join(lines) + "\n")


def _write(out: Path, stem: str, summary: dict, markdown: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    (out / f"{stem}.md").write_text(markdown)
