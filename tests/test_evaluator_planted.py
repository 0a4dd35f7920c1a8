"""The evaluator against planted candidates: each gets the right verdict and reason code."""

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from d2kbench.evaluate.evaluator import EvalOptions, Evaluation, InfraError, evaluate
from d2kbench.evaluate.report import format_result
from tests.conftest import HANG_TIMEOUT_S, PLANTED, started_evaluation

CASES = [
    ("wrong_values.py", "incorrect", "mismatch"),
    ("nan_one.py", "incorrect", "nan"),
    ("untouched_tail.py", "incorrect", "nan"),
    ("stale_by_address.py", "integrity", "stale_output"),
    ("stale_by_shape.py", "integrity", "stale_output"),
    ("aliased_output.py", "integrity", "alias"),
    ("torch_does_work.py", "integrity", "aten_op"),
    ("torch_behind_guard.py", "integrity", "aten_op"),  # the guard switched off: the traced call's aten ops
    ("subclass_output.py", "integrity", "not_plain_tensor"),
    ("forged_reply.py", "integrity", "forged_result"),  # its own message on the reply pipe, without the id
    ("malformed_result.py", "integrity", "malformed_result"),  # its worker's results described out of the spool
    ("no_triton.py", "integrity", "no_triton_launch"),
    ("mutates_input.py", "integrity", "input_mutated"),
    ("raises.py", "error", "exception"),
    ("syntax_error.py", "error", "import_error"),
    ("no_run.py", "error", "no_run"),
    ("segfault.py", "crash", "worker_died"),
    ("exit_with_fake_verdict.py", "crash", "worker_died"),
    ("infinite_loop.py", "timeout", "call_timeout"),
    ("reads_past_the_end.py", "crash", "out_of_bounds"),
    ("stray_access_caught.py", "crash", "out_of_bounds"),  # the interpreter's error caught: still recorded
    ("gpu_illegal_address.py", "crash", "out_of_bounds"),  # on the GPU crash/cuda_error (bench/gpu_integrity.py)
]


@pytest.mark.parametrize("planted,verdict,reason", CASES, ids=[c[0] for c in CASES])
def test_planted_candidate_gets_its_verdict(toy_task, planted, verdict, reason):
    # a hang costs the whole limit: a short one (the toy's calls take milliseconds in the interpreter)
    timeout = HANG_TIMEOUT_S if verdict == "timeout" else 20
    result = evaluate(toy_task, PLANTED / planted, EvalOptions(device="cpu", call_timeout_s=timeout))
    assert (result.verdict, result.reason) == (verdict, reason), result.detail
    assert not result.correct
    assert result.detail


def test_the_content_cache_is_correct_where_nothing_is_timed(toy_task):
    """gpu_content_cache.py serves right outputs from its cache: on the GPU only its speed on a fresh input set
    can give it away (`integrity/input_cache`, bench/gpu_integrity.py), never a comparison."""
    result = evaluate(toy_task, PLANTED / "gpu_content_cache.py", EvalOptions(device="cpu"))
    assert result.verdict == "pass", result.detail


def test_a_table_of_pointers_is_no_stray_access(toy_task):
    """pointer_table.py loads x and y through their addresses held in a tensor: accesses outside the launch's own
    tensors but inside live ones pass the interpreter's bounds check."""
    result = evaluate(toy_task, PLANTED / "pointer_table.py", EvalOptions(device="cpu"))
    assert result.verdict == "pass", result.detail


def test_a_stray_access_is_named_by_kernel_program_and_argument(toy_task):
    """The detail a person reads: which kernel, which program, how many elements, past the end of which argument."""
    result = evaluate(toy_task, PLANTED / "reads_past_the_end.py", EvalOptions(device="cpu"))
    assert (result.verdict, result.reason) == ("crash", "out_of_bounds")
    # n200 in blocks of 64: the fourth program's load of x is 56 elements past its end, starting right at it
    assert "axpy_kernel, program (3, 0, 0): a load of 56 of its 64 active elements" in result.detail
    assert "0 bytes past the end of `x_ptr`" in result.detail and "(workload n200)" in result.detail


def test_expert_passes_and_reports_each_workload(toy_task):
    result = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    assert result.verdict == "pass", result.detail
    assert [w.name for w in result.workloads] == ["n200", "n77_f16"]
    assert all(w.correct for w in result.workloads)
    assert all(w.timings == {} for w in result.workloads)  # no GPU: no timings


def test_deferred_work_in_a_thread_is_caught_by_the_dynamic_check(toy_task):
    """The import dodges a name scan; whatever the scan says, the late write itself is seen."""
    result = evaluate(toy_task, PLANTED / "deferred_thread.py", EvalOptions(device="cpu", call_timeout_s=20))
    late = [f for f in result.failures if f.reason == "side_stream"]
    assert result.verdict == "integrity"
    assert late and "output 0 changed after the call's stream was synchronized" in late[0].detail


def test_evaluation_reports_where_its_time_went(toy_task):
    result = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    assert set(result.phases_s) == {"start_workers", "inputs_and_oracle", "correctness"}
    assert all(v > 0 for v in result.phases_s.values())
    assert sum(result.phases_s.values()) <= result.elapsed_s
    assert {"trusted.make_inputs", "trusted.call", "candidate.put_inputs", "candidate.call",
            "parent.compare"} <= set(result.requests_s)
    # the same seconds per function as well: the oracle's calls apart from the candidate's
    parts = result.requests_s
    assert parts["trusted.call[oracle]"] <= parts["trusted.call"] and parts["candidate.call[run]"] > 0
    assert abs(sum(v for k, v in parts.items() if k.startswith("trusted.call[")) - parts["trusted.call"]) < 0.01
    # the spool writes inside those requests, as the workers report them, and never more than the requests took
    assert 0 < parts["candidate.call.pack"] <= parts["candidate.call"]
    assert 0 < parts["trusted.make_inputs.pack"] <= parts["trusted.make_inputs"]
    # and the checked calls' other stages: the call itself, the wait for late writes, the sync, the checks
    stages = [parts[f"candidate.call.{s}"] for s in ("run", "late_writes", "sync", "checks")]  # each recorded
    assert parts["candidate.call.run"] > 0 and sum(stages) + parts["candidate.call.pack"] <= parts["candidate.call"]
    assert parts["candidate.call.late_writes"] >= 0.05 * 4  # LATE_WORK_WAIT_S in each of its checked calls
    assert parts["candidate.call[run, traced]"] > 0  # the traced call (the last of each workload) apart


def test_segfault_names_the_signal(toy_task):
    result = evaluate(toy_task, PLANTED / "segfault.py", EvalOptions(device="cpu"))
    assert "SIGSEGV" in result.detail


def test_worker_is_replaced_after_a_crash(toy_task):
    """A crash on one workload does not stop the next workload from being evaluated."""
    result = evaluate(toy_task, PLANTED / "segfault.py", EvalOptions(device="cpu"))
    assert len(result.workloads) == 2
    assert all(w.correct is False for w in result.workloads)
    assert all("worker_died" in w.errors[0] for w in result.workloads)


def test_a_tolerance_that_admits_a_trivial_output_is_infra_never_a_pass(toy_task):
    """With atol far above the outputs' size, zeros would pass: the evaluation refuses to score it."""
    loose = dataclasses.replace(toy_task.outputs[0], atol={"float32": 1e3, "float16": 1e3})
    task = dataclasses.replace(toy_task, outputs=(loose,))
    result = evaluate(task, task.expert_path, EvalOptions(device="cpu", workloads=("n200",)))
    assert (result.verdict, result.reason) == ("infra", "harness_error")
    assert "output z passes the comparison with all zeros" in result.detail


@pytest.mark.parametrize("offset,label", [(0.0, "the output of another input set"), (100.0, "the constant")])
def test_a_tolerance_that_admits_a_constant_or_another_sets_output_is_refused(toy_task, offset, label):
    """Zeros fail here; a constant (outputs near their mean) or input-blind outputs must fail too."""
    spec = dataclasses.replace(toy_task.outputs[0], atol={"float32": 1.0}, rtol={"float32": 0.0})
    task = dataclasses.replace(toy_task, outputs=(spec,))
    ev = Evaluation(task, task.expert_path, EvalOptions(device="cpu"))
    try:
        spread = torch.linspace(-100, 100, 200, dtype=torch.float64) if offset == 0 else torch.rand(200) * 0.1
        first = spread + offset
        ev.expected["n200"] = {0: [first], 1: [first + 0.5]}
        with pytest.raises(InfraError, match=label):
            ev.check_tolerance_discriminates(task.workload("n200"))
        ev.expected["n200"] = {0: [first], 1: [first + 5.0]}
        if offset == 0:
            ev.check_tolerance_discriminates(task.workload("n200"))  # a tight enough tolerance passes
    finally:
        ev.close()


def test_fail_fast_stops_at_the_first_failed_workload(toy_task):
    full = evaluate(toy_task, PLANTED / "wrong_values.py", EvalOptions(device="cpu"))
    assert [w.correct for w in full.workloads] == [False, False]
    assert all(w.error == {} for w in full.workloads)  # a failed first call reports no error
    fast = evaluate(toy_task, PLANTED / "wrong_values.py", EvalOptions(device="cpu", fail_fast=True))
    assert (fast.verdict, fast.reason) == ("incorrect", "mismatch")
    assert [w.correct for w in fast.workloads] == [False, None]  # the second was never checked
    assert fast.workloads[1].errors == []


def test_errors_against_the_oracle_are_reported_for_candidate_and_reference(toy_task):
    result = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu", reference_error=True))
    for w in result.workloads:
        assert set(w.error) == {"z"} and set(w.reference_error) == {"z"}
        assert 0 <= w.error["z"] < 1e-2 and 0 <= w.reference_error["z"] < 1e-2
    assert format_result(result).count("error vs oracle z ") == len(result.workloads)
    assert "(reference " in format_result(result)
    assert evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu")).workloads[0].reference_error == {}


def candidate_state(ev: Evaluation) -> str:
    """The candidate worker's process state letter (T: stopped)."""
    with open(f"/proc/{ev.cand.proc.pid}/stat") as f:
        return f.read().split(") ")[1][0]


@pytest.mark.parametrize("ceiling,contended", [(1e6, False), (1e15, True)])
def test_timing_refuses_a_gpu_that_something_else_shares(toy_task, monkeypatch, ceiling, contended):
    """The copy probe against the GPU's measured bandwidth (a CPU stand-in for both here): far below
    it, even after waiting for queued work to drain, the workload's times would be dishonest and the
    evaluation is infra, never scored."""
    from d2kbench.evaluate import hardware
    from d2kbench.evaluate.result import WorkloadResult

    def measured_once(device, request):  # as on a fresh machine: measured through the evaluator's request
        request({"op": "probe"})
        return {"copy_bytes_per_s": ceiling}

    monkeypatch.setattr(hardware, "ceilings", measured_once)
    states = []  # the candidate's process state at each trusted request
    with started_evaluation(toy_task, quiet_wait_s=0.3) as ev:
        def trusted_request(message, timeout=None, original=ev.trusted_request):
            states.append((message["op"], candidate_state(ev)))
            return original(message, timeout)

        ev.trusted_request = trusted_request
        wr = WorkloadResult("n200", "cpu")
        assert ev.gpu_uncontended(toy_task.workload("n200"), wr) is not contended
        assert states == [("probe", "T"), ("probe", "T")]  # the ceilings, then the probe: the candidate stopped
        assert len(wr.gpu_probe) == 1 and wr.gpu_probe[0] > 0
        if contended:
            assert (ev.result.verdict, ev.result.reason) == ("infra", "gpu_contended")
            assert "something else runs on it" in ev.result.detail and "still after 0." in ev.result.detail
            assert wr.drained_s >= 0.3  # it waited for the GPU to drain before it gave up
        else:
            assert ev.result.verdict == "pass" and wr.drained_s == 0.0  # quiet at the first probe: no wait


@pytest.mark.parametrize("ceiling,contended", [(1e6, False), (1e15, True)])
def test_each_baseline_batch_waits_for_a_quiet_gpu_with_the_candidate_stopped(toy_task, monkeypatch, ceiling,
                                                                               contended):
    """A thread of the candidate's that kept the GPU busy was frozen by the stop, but the copies it had queued
    still ran beside the reference (2.6x its time on the H200): each trusted batch comes after a probe that
    waits for the GPU to drain, and before one more; a GPU that stays busy makes the workload infra."""
    from d2kbench.evaluate import hardware
    from d2kbench.evaluate.result import WorkloadResult

    monkeypatch.setattr(hardware, "ceilings", lambda device, request: {"copy_bytes_per_s": ceiling})
    seen = []
    with started_evaluation(toy_task, quiet_wait_s=0.3) as ev:
        def trusted_request(message, timeout=None, original=ev.trusted_request):
            seen.append((message["op"], candidate_state(ev)))
            if message["op"] == "time":  # timing itself needs a GPU
                return {"times_ms": [0.1, 0.1]}
            return original(message, timeout)

        ev.trusted_request = trusted_request
        wr = WorkloadResult("n200", "cpu")
        times = ev.timed_batch(toy_task.workload("n200"), wr, "reference", ev.trusted, [0], 2, graph=False,
                               validate=False)
        if contended:
            assert times is None and seen == [("probe", "T")]  # never timed
            assert (ev.result.verdict, ev.result.reason) == ("infra", "gpu_contended")
            assert "before the reference's timed batch" in ev.result.detail and wr.drained_s >= 0.3
        else:
            assert times == [0.1, 0.1] and seen == [("probe", "T"), ("time", "T"), ("probe", "T")]
            assert ev.result.verdict == "pass"
        assert candidate_state(ev) != "T"  # going on afterwards


def test_a_persisting_l2_carve_out_left_by_the_candidates_batch_is_integrity(toy_task, monkeypatch):
    """The worker reports the carve-out its process holds after a timed batch (it zeroed it before)."""
    from d2kbench.evaluate.result import WorkloadResult

    with started_evaluation(toy_task) as ev:
        monkeypatch.setattr(ev.cand, "request", lambda message, timeout=None: {  # timing itself needs a GPU
            "times_ms": [0.1, 0.1], "persisting_l2_bytes": 30 << 20})
        wr = WorkloadResult("n200", "cpu")
        assert ev.timed_batch(toy_task.workload("n200"), wr, "candidate", ev.cand, [0], 2, graph=False,
                              validate=False) is None
        assert (ev.result.verdict, ev.result.reason) == ("integrity", "persisting_l2")
        assert "31457280 bytes of L2" in ev.result.detail


@pytest.mark.parametrize("sandboxed", [True, False])
def test_inputs_reach_a_confined_candidate_by_links_and_others_by_copies(toy_task, monkeypatch, sandboxed):
    """The trusted worker's input files are hard-linked (read-only) into the spool of a candidate that runs
    under a uid of its own, instead of copied; the verdict is the same either way."""
    from d2kbench.evaluate import channel

    links = []

    def counted(value, source, spool, original=channel.link_value):
        links.append(source)
        return original(value, source, spool)

    monkeypatch.setattr(channel, "link_value", counted)
    result = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu", sandbox=sandboxed,
                                                                  workloads=("n77_f16",)))
    assert result.verdict == "pass", result.detail
    confined = sandboxed and result.environment["sandbox"].get("uid") is not None
    if sandboxed and not confined:
        pytest.skip("the candidate could not get a uid of its own here")
    assert (len(links) > 0) == confined


def test_the_device_side_content_cache_is_a_real_cache_and_correct_where_nothing_is_timed(toy_task, tmp_path):
    """gpu_graph_content_cache.py (bench/gpu_integrity.py's case for the replay sets): its kernel copies the output it
    kept while the inputs at the same addresses keep their contents (shown by spoiling what it kept) and computes
    once they change in place; its evaluation on the CPU passes."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('planted', {str(PLANTED / 'gpu_graph_content_cache.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "x, y = torch.randn(3000), torch.randn(3000)\n"
        "assert torch.allclose(m.run(x, y, 1.5), 1.5 * x + y)\n"
        "kept, _ = next(iter(m._caches.values())); kept.fill_(7.0)\n"
        "assert (m.run(x, y, 1.5) == 7.0).all()  # the same contents: the kept output, whatever it holds\n"
        "x.copy_(torch.randn(3000))\n"
        "assert torch.allclose(m.run(x, y, 1.5), 1.5 * x + y)  # new contents in place: computed\n"
        "print('ok')\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
    result = evaluate(toy_task, PLANTED / "gpu_graph_content_cache.py", EvalOptions(device="cpu"))
    assert result.verdict == "pass", result.detail
