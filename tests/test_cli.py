"""The `d2k` command: JSON shape and exit codes."""

import json
import os
import subprocess
import sys

from tests.conftest import FIXTURES, PLANTED, ROOT

TOY = str(FIXTURES / "toy_axpy")


def d2k(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "d2kbench", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_eval_json_pass_exits_zero():
    proc = d2k("eval", TOY, str(FIXTURES / "toy_axpy" / "expert.py"), "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"task", "verdict", "reason", "correct", "detail", "workloads"} <= out.keys()
    assert out["verdict"] == "pass" and out["correct"] is True and out["reason"] is None
    assert out["mode"] == "interpreter"
    assert [w["name"] for w in out["workloads"]] == ["n200", "n77_f16"]
    assert all(w["timings"] == {} for w in out["workloads"])


def test_eval_failure_exits_one_and_names_workload_subset():
    proc = d2k("eval", TOY, str(PLANTED / "wrong_values.py"), "--json", "--workloads", "n77_f16", "--device", "cpu")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert (out["verdict"], out["reason"], out["correct"]) == ("incorrect", "mismatch", False)
    assert [w["name"] for w in out["workloads"]] == ["n77_f16"]


def test_usage_errors_exit_two():
    assert d2k("eval", "no_such_task", "x.py").returncode == 2
    assert d2k("eval", TOY, "/nonexistent/file.py").returncode == 2
    assert d2k("eval", TOY, str(FIXTURES / "toy_axpy" / "expert.py"), "--workloads", "nope").returncode == 2
    assert d2k("frobnicate").returncode == 2


def test_tasks_list_and_show():
    proc = d2k("tasks", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    ids = {t["id"] for t in json.loads(proc.stdout)}
    assert "attn_decode_paged_gqa" in ids
    shown = json.loads(d2k("tasks", "show", "moe_align_block_size", "--json").stdout)
    assert shown["id"] == "moe_align_block_size" and shown["workloads"]
