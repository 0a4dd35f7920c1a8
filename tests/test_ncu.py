"""The ncu summary of the profile tool, on the CPU: the raw-CSV parser, the failure lines, and the tool's
output where there is no GPU (ncu itself runs only on a GPU: bench/diag/ncu_profile_check.py)."""

import asyncio

import pytest
import torch
import triton

from d2kbench.agent import LocalEvalService
from d2kbench.agent import evalservice as evalservice_module
from d2kbench.agent.models.base import ToolCall
from d2kbench.agent.tools import Toolbox, format_compile_report
from d2kbench.evaluate import ncu
from d2kbench.evaluate.ncu import KernelSummary, NcuProfile, failure_message, ncu_available, parse_raw_csv
from d2kbench.evaluate.sm90 import launch_shape, programs_per_sm
from d2kbench.evaluate.workers import RequestFailed, WorkerFault

FIXED = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
        '"Device","CC",'
STALL_LS = ncu.stall_metric("long_scoreboard")
STALL_BAR = ncu.stall_metric("barrier")
COLUMNS = ["dram__bytes.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
           "launch__registers_per_thread", "launch__shared_mem_per_block_dynamic",
           "launch__shared_mem_per_block_static", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active", STALL_BAR, STALL_LS]
# as `ncu --csv --page raw --print-units base` writes it to its log file, ==PROF== lines included
RAW = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)",
    "==PROF== Profiling \"_moe_align_kernel\" - 0: 0%....50%....100% - 9 passes",
    "==PROF== Profiling \"vectorized_elementwise_kernel\" - 1: 0%....50%....100% - 9 passes",
    "==PROF== Disconnected from process 4242",
    FIXED + ",".join(f'"{c}"' for c in COLUMNS),
    '"","","","","","","","","","","",' + ",".join(f'"{u}"' for u in [
        "byte", "%", "%", "nsecond", "register/thread", "byte/block", "byte/block", "%", "%", "", ""]),
    '"0","4242","python3.11","127.0.0.1","_moe_align_kernel","1","7","(128, 1, 1)","(132, 1, 1)","0","9.0",'
    '"1,234,567","45.12","50.3","12,345","40","16,384","0","12.5","38.04","0.51","3.27"',
    '"1","4242","python3.11","127.0.0.1","vectorized_elementwise_kernel","1","7","(128, 1, 1)","(8, 1, 1)","0",'
    '"9.0","n/a","0.8","1.1","2,016","16","0","0","0.4","n/a","0","0"',
])


def test_raw_csv_gives_one_summary_per_launch():
    first, second = parse_raw_csv(RAW)
    assert first == KernelSummary(
        name="_moe_align_kernel", grid="(132,1,1)", block="(128,1,1)", duration_us=12.345, dram_pct=45.12,
        dram_bytes=1234567.0, memory_pct=50.3, sm_pct=12.5, occupancy_pct=38.04, registers=40, shared_bytes=16384,
        top_stall=("long_scoreboard", 3.27))
    assert second.name == "vectorized_elementwise_kernel" and second.duration_us == 2.016
    assert second.dram_bytes is None and second.occupancy_pct is None  # "n/a"
    assert second.top_stall is None and second.shared_bytes == 0  # no stall above zero


def test_scaled_units_missing_metrics_and_no_csv():
    text = "\n".join([FIXED + '"gpu__time_duration.sum","dram__bytes.sum","launch__shared_mem_per_block_dynamic"',
                      '"","","","","","","","","","","","usecond","Mbyte","Kbyte/block"',
                      '"0","1","p","h","k","1","7","(64, 1, 1)","(1, 1, 1)","0","9.0","1.5","2.5","4"'])
    (k,) = parse_raw_csv(text)
    assert (k.duration_us, k.dram_bytes, k.shared_bytes) == (1.5, 2.5e6, 4000)
    assert k.registers is None and k.sm_pct is None and k.top_stall is None
    assert parse_raw_csv("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n") == []
    assert parse_raw_csv("") == []


def test_failures_become_one_line():
    assert failure_message(None, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", "") == \
        ncu.PERMISSION
    assert failure_message(None, "==PROF== x\n==ERROR== Failed to find metric foo\n==ERROR== later", "") == \
        "Failed to find metric foo"
    assert failure_message(None, "==ERROR== An error was reported by the counter measurement library:\n"
                                 "    Failed to open /dev/x\n==PROF== Disconnected", "") == \
        "An error was reported by the counter measurement library: Failed to open /dev/x"
    assert failure_message(None, "==WARNING== No kernels were profiled.", "").startswith("ncu profiled no kernel")
    assert "\n" not in failure_message(RuntimeError("a\nb"), "", "line one\nlast line\n")


def test_ncu_available_says_why_not(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ncu_available() == "no CUDA GPU is visible"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    assert ncu_available() == "ncu (Nsight Compute) is not on PATH"


def test_ncu_available_on_this_cpu_machine(toy_task, tmp_path):
    if not torch.cuda.is_available():
        assert ncu_available() == "no CUDA GPU is visible"
    profile = ncu.profile_ncu(toy_task, tmp_path / "solution.py", device="cpu")
    assert profile == NcuProfile("n1m", error="ncu needs a CUDA device, not cpu")


def profile_output(task, tmp_path, evals, gpu):
    (tmp_path / "solution.py").write_text("def run(x, y, alpha):\n    return x\n")
    toolbox = Toolbox(task, tmp_path, evals, gpu=gpu, output_chars=16000)
    return asyncio.run(toolbox.call(ToolCall("a", "profile", "{}"))).output


REPORT = [{"kernel": "axpy_kernel", "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 3, "ok": True,
           "registers": 18, "spill_store_bytes": 0, "spill_load_bytes": 0, "shared_bytes": 0,
           "stack_frame_bytes": 0, "wgmma": False}]


def test_profile_tool_without_a_gpu_keeps_the_compile_report_and_says_why(toy_task, tmp_path, monkeypatch):
    monkeypatch.setattr(evalservice_module, "compile_report", lambda task, candidate: REPORT)
    out = profile_output(toy_task, tmp_path, LocalEvalService(["cpu"]), gpu=False)
    assert out.startswith("sm_90 compile report") and "axpy_kernel(BLOCK=1024) num_warps=4" in out
    assert out.splitlines()[-1] == "no ncu summary: interpreter mode (no GPU): hardware counters need one"
    monkeypatch.setattr(evalservice_module, "ncu_available", lambda: "ncu (Nsight Compute) is not on PATH")
    out = profile_output(toy_task, tmp_path, LocalEvalService(["cuda:0"]), gpu=True)
    assert "registers=18" in out and out.splitlines()[-1] == "no ncu summary: ncu (Nsight Compute) is not on PATH"


def test_profile_tool_appends_one_line_per_kernel(toy_task, tmp_path, monkeypatch):
    monkeypatch.setattr(evalservice_module, "compile_report", lambda task, candidate: REPORT)
    monkeypatch.setattr(evalservice_module, "ncu_available", lambda: None)
    seen = []

    def fake_profile(task, candidate, device, workload):
        seen.append((candidate.name, device, workload))
        return NcuProfile(workload, parse_raw_csv(RAW))

    monkeypatch.setattr(evalservice_module, "profile_ncu", fake_profile)
    out = profile_output(toy_task, tmp_path, LocalEvalService(["cuda:1"]), gpu=True)
    assert seen == [("solution.py", "cuda:1", "n1m")]
    lines = out.splitlines()
    assert lines[0].startswith("sm_90 compile report") and lines[2].startswith(
        "ncu, one call of run on workload n1m (2 kernel launches, 14.36 us of kernel time")
    assert lines[3] == ("- _moe_align_kernel grid=(132,1,1) block=(128,1,1): 12.35 us, DRAM 45.1% (1.235 MB), "
                        "memory 50.3%, SM 12.5%, occupancy 38.0%, registers/thread 40, shared/block 16384 B, "
                        "top stall long_scoreboard (3.3 cycles/instr)")
    assert lines[4].startswith("- vectorized_elementwise_kernel grid=(8,1,1)") and "DRAM 0.8% (n/a)" in lines[4]
    assert len(lines) == 5


def test_a_hang_before_any_candidate_code_is_ncus_fault_and_a_hang_in_the_call_is_not():
    hang = WorkerFault("timeout", "no reply within 116 s")
    for stage in ("start", "inputs"):
        failure = ncu.stage_failure(stage, hang, "", "")
        assert failure.ncu_fault and "ncu could not attach" in str(failure)
        assert str(failure).startswith("profiling timed out (no reply within 116 s)")
    for stage in ("load", "call"):  # the candidate's import and its run: a hang may be the candidate's own
        failure = ncu.stage_failure(stage, hang, "", "")
        assert not failure.ncu_fault and str(failure) == "profiling timed out (no reply within 116 s)"
    denied = ncu.stage_failure("call", RequestFailed({"error": "RuntimeError", "message": "x"}),
                               "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", "")
    assert denied.ncu_fault and str(denied) == ncu.PERMISSION
    crashed = ncu.stage_failure("inputs", WorkerFault("crash", "exit code -11"), "", "")
    assert not crashed.ncu_fault
    library = ncu.stage_failure("call", WorkerFault("crash", "exit code 1"),
                                "==ERROR== An error was reported by the counter measurement library:\n  x", "")
    assert library.ncu_fault


def test_the_service_stops_trying_ncu_after_ncus_own_failure(toy_task, tmp_path, monkeypatch):
    monkeypatch.setattr(evalservice_module, "compile_report", lambda task, candidate: REPORT)
    monkeypatch.setattr(evalservice_module, "ncu_available", lambda: None)
    answers = [NcuProfile("n1m", error="solution.py failed under ncu: ValueError: bad"),
               NcuProfile("n1m", error="profiling timed out (...): ncu could not attach to it", ncu_fault=True)]
    calls = []

    def fake_profile(task, candidate, device, workload):
        calls.append(device)
        return answers[len(calls) - 1]

    monkeypatch.setattr(evalservice_module, "profile_ncu", fake_profile)
    service = LocalEvalService(["cuda:0"])
    outs = [profile_output(toy_task, tmp_path, service, gpu=True).splitlines()[-1] for _ in range(3)]
    assert len(calls) == 2  # the candidate's failure is retried next time; ncu's own is not
    assert outs[0] == "no ncu summary: solution.py failed under ncu: ValueError: bad"
    assert outs[1] == "no ncu summary: profiling timed out (...): ncu could not attach to it"
    assert outs[2] == ("no ncu summary: ncu failed here earlier and is not tried again: profiling timed out (...): "
                       "ncu could not attach to it")


def test_compile_report_names_its_workload_and_counts_repeated_launches():
    """muon's expert launches one configuration nine times per call: one line, with the count."""
    other = {**REPORT[0], "constexprs": {"BLOCK": 256}, "registers": 30}
    out = format_compile_report([REPORT[0], other, REPORT[0], REPORT[0]], "n1m").splitlines()
    assert out[0] == "sm_90 compile report (the kernels solution.py launches on workload n1m, its shapes and dtype):"
    assert len(out) == 3 and out[1].endswith("wgmma=no [3 launches]") and "registers=18" in out[1]
    assert "BLOCK=256" in out[2] and not out[2].endswith("launches]")
    assert "workload n1m?" in format_compile_report([], "n1m")
    assert "programmatic dependent launch" not in out[1]
    pdl = format_compile_report([{**REPORT[0], "dependent_launch": True}], "n1m").splitlines()[1]
    assert pdl.endswith("wgmma=no, programmatic dependent launch"), pdl


def test_the_same_source_is_compiled_once_per_task(toy_task, tmp_path, monkeypatch):
    compiled = []

    def fake_report(task, candidate):
        compiled.append(candidate.read_text())
        return [dict(REPORT[0], source=candidate.read_text())]

    monkeypatch.setattr(evalservice_module, "compile_report", fake_report)
    service = LocalEvalService(["cpu"])
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("x = 1\n")
    second.write_text("x = 1\n")  # another workspace, the same bytes
    reports = [asyncio.run(service.compile_report(toy_task, path)) for path in (first, second)]
    assert compiled == ["x = 1\n"] and reports[0] == reports[1]
    reports[0][0]["registers"] = 0  # a caller's edit does not reach the kept report
    second.write_text("x = 2\n")
    assert asyncio.run(service.compile_report(toy_task, second))[0]["source"] == "x = 2\n"
    assert compiled == ["x = 1\n", "x = 2\n"]
    assert asyncio.run(service.compile_report(toy_task, first))[0]["registers"] == 18


def test_ncu_install_folders_follow_the_links_under_its_prefix_and_take_the_standalone_root(tmp_path, monkeypatch):
    """As on the H200: /usr/local/cuda-13.0/bin/ncu, a launcher script, and /opt/nvidia/nsight-compute."""
    prefix, real, standalone = tmp_path / "cuda", tmp_path / "linked", tmp_path / "opt" / "nvidia" / "nsight-compute"
    (prefix / "bin").mkdir(parents=True)
    real.mkdir(parents=True)
    monkeypatch.setattr(ncu, "STANDALONE_ROOTS", (standalone, tmp_path / "absent"))
    (prefix / "nsight-compute-2025.3.1").symlink_to(real)
    (prefix / "version.json").symlink_to(prefix / "bin")  # a link to a folder inside: nothing new
    tool = prefix / "bin" / "ncu"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert ncu.install_folders(str(tool)) == sorted([str(prefix), str(real)])
    standalone.mkdir(parents=True)
    assert ncu.install_folders(str(tool)) == sorted([str(prefix), str(real), str(standalone)])
    assert ncu.install_folders(str(tmp_path / "absent")) == []


@pytest.mark.parametrize(("registers", "warps", "shared", "expected"), [
    (134, 8, 98304, (1, "registers")),  # muon's symmetric products: ncu, 4608 programs in 34.9 waves on 132 SMs
    (128, 8, 98304, (2, "registers and shared memory")),  # the same capped at 128 registers
    (122, 4, 73400, (3, "shared memory")),  # attention's split kernel: ncu, 1536 programs in 3.88 waves
    (50, 1, 0, (32, "the 32-program limit")),  # attention's merge: ncu's block limits 36 (registers), 32 (SM)
    (24, 16, 0, (4, "warps")),
    (64, 4, 270_000, (0, "shared memory")),  # more than an SM has: does not launch
])
def test_programs_per_sm_follow_the_sm90_occupancy_rules(registers, warps, shared, expected):
    """Checked against ncu's launch statistics on the H200 (bench/results/2026-12-04-h200-sweep-16, calls 5 and 7)."""
    assert programs_per_sm(registers, warps, shared) == expected


def test_compile_report_shows_the_programs_per_sm():
    line = format_compile_report([{**REPORT[0], "programs_per_sm": 1, "programs_limited_by": "registers"}],
                                 "n1m").splitlines()[1]
    assert line.endswith("programs per SM=1 (limited by registers)")


def test_compile_report_says_when_ptxas_serialized_the_wgmmas():
    report = {**REPORT[0], "wgmma": True, "wgmma_serialized": "non wgmma instructions defining accumulator registers"}
    line = format_compile_report([report], "n1m").splitlines()[1]
    assert "wgmma=yes but SERIALIZED by ptxas (each waits for the one before: non wgmma instructions defining " \
           "accumulator registers)" in line
    assert "SERIALIZED" not in format_compile_report([{**REPORT[0], "wgmma": True}], "n1m")


def test_compile_report_says_how_a_products_operands_reach_shared_memory():
    def line(**features):
        return format_compile_report([{**REPORT[0], **features}], "n1m").splitlines()[1]

    assert line(wgmma=True, cp_async=True).endswith("wgmma=yes, cp.async")
    assert line(wgmma=True, tma=True).endswith("wgmma=yes, TMA")
    assert "wgmma=yes (no cp.async or TMA: the operands pass through registers)" in line(wgmma=True)
    assert "pass through registers" not in line(wgmma=False)  # no product: plain loads are the norm


def test_compile_report_shows_the_grid_and_its_waves():
    report = {**REPORT[0], "programs_per_sm": 3, "programs_limited_by": "shared memory", "grid": [4, 1, 264],
              "programs": 1056, "waves": 1056 / 396}
    line = format_compile_report([report], "n1m").splitlines()[1]
    assert line.endswith("programs per SM=3 (limited by shared memory); grid=(4, 1, 264): 1056 programs, "
                         "2.67 waves on 132 SMs")


def test_launch_shape_reads_tuples_and_grid_functions():
    assert launch_shape((4, 1, 264), {}, 3) == {"grid": [4, 1, 264], "programs": 1056, "waves": 1056 / 396}
    meta = {"n": 1000, "BLOCK": 128}
    assert launch_shape(lambda m: (triton.cdiv(m["n"], m["BLOCK"]),), meta, None) == {"grid": [8], "programs": 8}
    assert launch_shape(lambda m: (m["missing"],), meta, 2) == {}  # a grid it cannot read: no grid, no error
    assert "waves" not in launch_shape((10,), {}, 0)  # a kernel that does not fit on an SM has no waves


def test_the_profiled_worker_starts_under_ncu_in_a_loopback_namespace_never_forked(tmp_path):
    """ncu must start the process it profiles: its sandbox is not forkable, and its fresh interpreter's command is
    the loopback-only namespace, then ncu, then the sandbox's own entry with its plan."""
    import json
    import sys

    from d2kbench.suite import find_task

    box = ncu._NcuSandbox(["ncu", "--flag"], find_task("quant_per_token_group_fp8"), "cuda:0")
    (tmp_path / "home").mkdir()
    (tmp_path / "spool").mkdir()
    try:
        command = box.prepare(tmp_path / "home", tmp_path / "spool")
    finally:
        box.release()
    assert not box.forkable
    entry = [sys.executable, "-m", "d2kbench.evaluate.sandbox"]
    assert command[:5] == [*entry, "--loopback-netns", "--"] and command[5:7] == ["ncu", "--flag"]
    assert command[7:10] == entry and command[-1] == "--"
    assert json.loads(command[10])["home"] == str(tmp_path / "home")
