"""bench/expert_targets.py: issue 3's targets judged from suite bench files, on committed H200 results and on
records built to sit on each side of a target."""

import copy
import importlib.util
import json
import sys

import pytest

from tests.conftest import ROOT

MUON_RUN = ROOT / "bench/results/2026-12-04-h200-owed-19/call3/bench_muon/bench.json"


@pytest.fixture(scope="module")
def targets():
    spec = importlib.util.spec_from_file_location("expert_targets", ROOT / "bench" / "expert_targets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["expert_targets"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def workload(name, ms, sol=0.5, versus=2.0, graph_ms=None, split="scored"):
    return {"name": name, "split": split, "sol_fraction": sol, "speedup_vs_comparator": versus,
            "timings": {"candidate": {"median_ms": ms, "graph_median_ms": graph_ms}},
            "error": {"o": 1e-3}, "reference_error": {"o": 2e-3}}


def bench_file(tmp_path, name, date, results):
    path = tmp_path / name
    path.write_text(json.dumps({"date": date, "results": results}))
    return path


def rows_for(rows, task, workload_name=""):
    return [r for r in rows if r.startswith(f"| {task} |") and workload_name in r]


def test_the_committed_muon_run_meets_all_but_the_batch(targets):
    rows, ok = targets.check([MUON_RUN])
    assert not ok
    batch = rows_for(rows, "muon_newton_schulz", "qwen3_30b_a3b_experts_128x768x2048")
    assert any("1.742x | MISSED by 12.9%" in r for r in batch)  # the 13% the notes give
    assert all("| met |" in r for r in rows_for(rows, "muon_newton_schulz", "llama3"))
    assert all("| NVIDIA H200 |" in r for r in rows_for(rows, "muon_newton_schulz"))  # the GPU it ran on
    assert sum("error beside" in r and "| met |" in r for r in rows) == 4
    square = [r for r in rows if ">= 1.2 x" in r]  # only the square workload is held to 1.2x
    assert len(square) == 1 and "4096x4096" in square[0]
    # the tasks without a file miss every target they have
    assert any("| attn_decode_paged_gqa |" in r and "MISSED: no result" in r for r in rows)


def test_large_is_the_bytes_floor_and_margins_are_reported(targets, tmp_path):
    attn = {"task": "attn_decode_paged_gqa", "verdict": "pass", "workloads": [
        workload("big", ms=0.100, sol=0.84),            # floor 84 us: held, missed by 1.2%
        workload("short", ms=0.040, sol=0.5),           # floor 20 us: not held to the bandwidth target
        workload("slow_vs_sdpa", ms=0.200, sol=0.9, versus=0.949),
        workload("hidden_one", ms=0.100, sol=0.1, split="hidden")]}  # hidden workloads are not scored
    rows, ok = targets.check([bench_file(tmp_path, "a.json", "2026-12-05 10:00:00 UTC", [attn])])
    bandwidth = [r for r in rows_for(rows, "attn_decode_paged_gqa") if "of copy bandwidth" in r]
    assert [r.split(" | ")[2].split(" (")[0] for r in bandwidth] == ["big", "slow_vs_sdpa"]
    assert "MISSED by 1.2%" in bandwidth[0] and "| met |" in bandwidth[1]
    versus = [r for r in rows if "x the comparator" in r and r.startswith("| attn")]
    assert len(versus) == 3 and "MISSED by 0.1%" in versus[2]
    assert not any("hidden_one" in r for r in rows)


def test_strict_targets_and_graph_times(targets, tmp_path):
    moe = {"task": "moe_align_block_size", "verdict": "pass", "workloads": [
        workload("tie", ms=0.010, versus=1.0, graph_ms=0.005), workload("faster", ms=0.010, versus=1.01)]}
    rows, _ = targets.check([bench_file(tmp_path, "m.json", "2026-12-05 10:00:00 UTC", [moe])])
    tie, faster = rows_for(rows, "moe_align_block_size")
    assert "MISSED" in tie and "(5.0 us)" in tie  # "faster than" is strict; the graph replay is the scored time
    assert "| met |" in faster


def test_the_newest_file_of_a_task_is_judged_and_a_failed_run_misses(targets, tmp_path):
    good = {"task": "moe_align_block_size", "verdict": "pass", "workloads": [workload("w", ms=0.01, versus=3.0)],
            "environment": {"gpu": "NVIDIA H100 80GB HBM3"}}
    bad = copy.deepcopy(good) | {"verdict": "incorrect"}
    old = bench_file(tmp_path, "old.json", "2026-12-04 10:00:00 UTC", [good])
    new = bench_file(tmp_path, "new.json", "2026-12-05 10:00:00 UTC", [bad])
    rows, _ = targets.check([new, old])
    assert rows_for(rows, "moe_align_block_size") == [
        f"| moe_align_block_size | > 1 x the comparator (all workloads) | - | - | MISSED: verdict incorrect | "
        f"NVIDIA H100 80GB HBM3 | {new} |"]  # the GPU named: issue 3's targets are the H200's
    rows, _ = targets.check([old])
    assert "| met |" in rows_for(rows, "moe_align_block_size")[0]


def test_an_error_without_the_references_beside_it_is_not_reported(targets, tmp_path):
    muon = json.loads(MUON_RUN.read_text())["results"][0]
    muon["workloads"][0]["reference_error"] = {}
    rows, _ = targets.check([bench_file(tmp_path, "u.json", "2026-12-05 10:00:00 UTC", [muon])])
    errors = [r for r in rows if "error beside" in r]
    assert "MISSED" in errors[0] and all("| met |" in r for r in errors[1:])
