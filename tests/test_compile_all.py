"""bench/diag/compile_all.py: every expert (and ablation) compiled for sm_90 on every workload of the splits."""

import importlib.util
import os
import subprocess
import sys

from d2kbench.suite import find_task
from tests.conftest import ROOT

SCRIPT = ROOT / "bench" / "diag" / "compile_all.py"


def test_every_workload_of_the_splits_is_compiled_and_passes():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tasks", "moe_align_block_size", "--splits", "scored"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    for w in find_task("moe_align_block_size").split("scored"):
        assert any(f"moe_align_block_size expert {w.name} " in line and "registers" in line for line in lines), w.name
    assert lines[-1] == "0 kernel(s) failed or serialized"


def test_a_serialized_or_failed_kernel_fails_the_walk(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("compile_all", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reports = [
        {"kernel": "_gram", "ok": True, "registers": 188, "wgmma": True, "constexprs": {"SELF": "True"},
         "wgmma_serialized": "non wgmma instructions defining accumulator registers"},
        {"kernel": "_gram", "ok": True, "registers": 188, "wgmma": True, "constexprs": {"SELF": "True"},
         "wgmma_serialized": "non wgmma instructions defining accumulator registers"},  # same specialisation
        {"kernel": "_other", "ok": False, "error": "CompilationError: out of resource"},
    ]
    monkeypatch.setattr(module, "compile_report", lambda task, path, workload: reports)
    monkeypatch.setattr(sys, "argv", ["compile_all.py", "--tasks", "quant_per_token_group_fp8", "--splits", "scored"])
    assert module.main() == 1
    out = capsys.readouterr().out
    workloads = len(find_task("quant_per_token_group_fp8").split("scored"))
    assert out.count("wgmma SERIALIZED: non wgmma instructions") == workloads  # once per specialisation
    assert out.count("CompilationError: out of resource") == workloads
    assert out.splitlines()[-1] == f"{2 * workloads} kernel(s) failed or serialized"
