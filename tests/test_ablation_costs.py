"""bench/ablation_costs.py: the slowdown an ablation's evaluations give each workload, its table, and the script run
end to end on one task's real ablations (the interpreter: verdicts, nothing timed)."""

import json
import subprocess
import sys

from d2kbench.evaluate.result import EvalResult, WorkloadResult
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import ablation_costs  # noqa: E402


def result(fractions: dict[str, float | None]) -> EvalResult:
    r = EvalResult(task="t", candidate="a.py", mode="gpu")
    r.workloads = [WorkloadResult(name, "scored", correct=True, fraction_of_expert=f) for name, f in fractions.items()]
    return r


def test_slowdown_is_the_ablations_time_over_the_experts_per_evaluation():
    got = ablation_costs.slowdowns([result({"big": 0.5, "small": 1.0}), result({"big": 0.8, "small": None})])
    assert got == {"big": [2.0, 1.25], "small": [1.0]}  # an untimed workload adds nothing


def test_table_gives_median_and_range_and_the_rubrics_figure_once():
    record = {"task": "t", "ablation": "p", "verdicts": ["pass", "pass"], "recorded": "1.4x (bench/results/x)",
              "slowdowns": {"big": [2.0, 1.25, 1.5], "small": [1.0, 1.0]}}
    rows = ablation_costs.table_rows(record)
    assert rows == ["| t | `p` | big | 1.500x (1.250-2.000) | pass, pass | 1.4x (bench/results/x) |",
                    "| t | `p` | small | 1.000x (1.000-1.000) | pass, pass |  |"]
    empty = ablation_costs.table_rows({**record, "slowdowns": {}})
    assert empty == ["| t | `p` | (nothing timed) | | pass, pass | 1.4x (bench/results/x) |"]


def test_script_evaluates_every_ablation_of_a_task(tmp_path):
    out, table = tmp_path / "abl.json", tmp_path / "abl.md"
    done = subprocess.run([sys.executable, str(ROOT / "bench/ablation_costs.py"), "--tasks", "moe_align_block_size",
                           "--repeats", "1", "--json", str(out), "--markdown", str(table)],
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = json.loads(out.read_text())
    assert [r["ablation"] for r in records] == ["relaxed_private_atomics", "single_launch_small"]
    assert all(r["verdicts"] == ["pass"] and "bench/results/" in r["recorded"] for r in records)
    assert table.read_text().count("| moe_align_block_size |") == 2
