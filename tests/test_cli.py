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
    proc = d2k("eval", TOY, str(PLANTED / "wrong_values.py"), "--json", "--workloads", "n77_f16", "--device", "cpu",
               "--file-inputs", "--file-outputs")  # the GPU routes' switches: nothing to switch on a CPU
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


def test_bench_table_has_one_cell_per_column_with_errors_beside_the_references():
    from d2kbench.suitecheck import _bench_markdown

    timing = {"median_ms": 0.2, "graph_median_ms": None, "min_ms": 0.1, "max_ms": 0.3, "samples": 5}
    work = {"name": "w", "timings": {"reference": timing, "candidate": {**timing, "median_ms": 0.1}},
            "speedup": 2.0, "achieved_tbps": 1.5, "achieved_tflops": 0.0, "sol_fraction": 0.5,
            "error": {"out": 1.5e-3}, "reference_error": {"out": 4e-3}}
    summary = {"environment": {"gpu": "H200"}, "date": "today", "results": [
        {"task": "t", "verdict": "pass", "workloads": [work]},
        {"task": "u", "verdict": "crash", "reason": "worker_died", "detail": "died", "workloads": []}]}
    rows = [line for line in _bench_markdown(summary).splitlines() if line.startswith("| ")]
    assert len({line.count("|") for line in rows}) == 1, rows
    assert "out 1.50e-03 / 4.00e-03" in rows[1] and "| - | 100.0 | 2.00x | - | - |" in rows[1]



def test_bench_report_says_which_configuration_each_comparator_kernel_ran_and_why():
    from d2kbench.suitecheck import _bench_markdown

    pick = {"kernel": "triton_per_fused_0", "inductor_ms": {"X=1": 0.004, "X=2": 0.0042}, "inductor_pick": "X=1",
            "kept": "X=2", "harness_ms": {"X=1": 0.0058, "X=2": 0.0043}}
    untimed = {**pick, "kept": "X=1", "harness_ms": {}, "note": "not timed: within 1.0 us"}
    work = {"name": "m8", "timings": {}, "comparator_picks": [pick, {**pick, "kept": "X=1", "harness_ms": {}}, untimed]}
    text = _bench_markdown({"environment": {}, "date": "today", "results": [
        {"task": "quant", "verdict": "pass", "workloads": [work]}]})
    assert "- quant m8: triton_per_fused_0 Inductor picked X=1, kept X=2 (us: X=1 5.8, X=2 4.3)" in text
    assert "- quant m8: triton_per_fused_0 Inductor picked X=1, the same\n" in text
    assert "- quant m8: triton_per_fused_0 Inductor picked X=1, the same (not timed: within 1.0 us)\n" in text


def test_the_command_line_starts_without_torch():
    """`d2k --help`, `d2k tasks ...` and usage errors answer at once: torch comes only with a command that
    evaluates (the judge's retries default once pulled the whole agent, and torch, in)."""
    code = "import sys, d2kbench.cli; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_run_commands_refuse_a_results_file_that_is_no_run_store(tmp_path):
    """Garbage bytes, another application's SQLite file, a newer store schema: a usage error, not a traceback,
    and `d2k run` writes nothing into the file."""
    import sqlite3

    from d2kbench.runs.store import Store

    garbage, foreign, newer = tmp_path / "garbage", tmp_path / "foreign", tmp_path / "newer"
    garbage.mkdir()
    (garbage / "results.sqlite").write_bytes(b"\x00\xffnot sqlite" * 100)
    foreign.mkdir()
    db = sqlite3.connect(foreign / "results.sqlite")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    store = Store(newer)
    store.db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    store.close()
    for folder, message in ((garbage, "is not a d2k run store (file is not a database)"),
                            (foreign, "is not a d2k run store (its tables are notes"),
                            (newer, "store schema 999; this d2kbench reads schema 1")):
        before = (folder / "results.sqlite").read_bytes()
        for args in (["runs", "summary", str(folder)], ["judge", str(folder), "--judge-model", "scripted/judge:x"],
                     ["run", "--model", "scripted/expert", "--tasks", TOY, "--configs", "none", "--devices", "cpu",
                      "--out", str(folder)]):
            proc = d2k(*args)
            assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc)
        assert (folder / "results.sqlite").read_bytes() == before


def test_run_out_must_be_a_folder(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for out in (afile, afile / "sub"):
        proc = d2k("run", "--model", "scripted/expert", "--tasks", TOY, "--devices", "cpu", "--out", str(out))
        assert proc.returncode == 2 and f"--out must be a folder: {afile} is a file" in proc.stderr, proc.stderr
    assert afile.read_text() == "mine"


def test_run_refuses_a_gpu_that_is_not_there_before_making_the_store(tmp_path):
    out = tmp_path / "run"
    proc = d2k("run", "--model", "scripted/expert", "--tasks", TOY, "--devices", "cuda:0,cuda:99", "--out", str(out))
    assert proc.returncode == 2 and "cuda:99: no such GPU here (visible: " in proc.stderr, proc.stderr
    assert not out.exists()
