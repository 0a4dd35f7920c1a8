"""The timing rounds end to end on the CPU: real workers (the candidate sandboxed), the host clock in place of CUDA
events (`HostTimer`). What the GPU-only flow does with the input sets (the rotation, the checked round's fresh set
written in place and left out of the warm-up, the baselines on the candidate's sets, the outputs revalidated) runs
here, in CI."""

import shutil

import pytest
import torch

from d2kbench.evaluate import timing
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import InfraError, WorkloadResult
from d2kbench.evaluate.timing import SPARE_OUTPUT_SETS, HostTimer, warmup_slots
from tests.conftest import PLANTED


def test_the_unwarmed_slot_is_left_out_of_the_warm_up():
    assert warmup_slots([10, 11, 12], 3, None) == [10, 11, 12]
    assert warmup_slots([10, 11, 12], 3, 11) == [10, 12, 10]
    assert warmup_slots([10], 2, 10) == []


def test_the_unwarmed_slots_output_is_its_first_calls():
    """A candidate that answers the first call on unseen inputs with something else, and writes the right result
    into the same buffer later, is checked on what its first call returned."""
    out = torch.zeros(4)
    calls = []

    def call(slot):
        calls.append(slot)
        out.fill_(float(len(calls)))  # one buffer, rewritten by every call
        return out

    times, outputs = HostTimer().time(call, lambda slot: None, [0, 1], reps=6, warmup=2, graph=False, unwarmed=1)
    assert calls[:2] == [0, 0] and calls[2:] == [0, 1, 0, 1, 0, 1]  # warm-up on slot 0 only; then the timed calls
    assert len(times) == 6
    assert float(outputs[1][0]) == 4.0  # slot 1's first timed call (the fourth call in all), not its last
    assert outputs[0] is out


def test_the_timed_calls_find_their_outputs_blocks_ready(monkeypatch):
    """Before the timed calls, blocks like the warm-up's outputs are allocated and freed, one set per slot and two
    spare: the timed loop holds one output per slot, and its first round of calls must not wait for the driver's
    allocations (the fresh set's call did on the H200, bench/results/2026-12-04-h200-owed-13)."""
    made = []
    real = torch.empty_like
    monkeypatch.setattr(timing.torch, "empty_like", lambda t: made.append((t.shape, t.dtype, t.stride())) or real(t))
    outputs = (torch.zeros(3, 5).t(), torch.zeros(2, dtype=torch.int32), 7)
    HostTimer().time(lambda slot: outputs, lambda slot: None, [0, 1, 2], reps=3, warmup=1, graph=False)
    shapes = [(torch.Size([5, 3]), torch.float32, (1, 5)), (torch.Size([2]), torch.int32, (1,))]
    assert made == shapes * (3 + SPARE_OUTPUT_SETS)  # strides kept: a column-major output's block is its size too
    made.clear()
    HostTimer().time(lambda slot: outputs, lambda slot: None, [0, 1, 2], reps=3, warmup=0, graph=False)
    assert made == []  # no warm-up, no output to go by


def timed(toy_task, candidate, monkeypatch, dropped: bool = False) -> Evaluation:
    """`candidate` checked and timed on the toy's cpu workload n200, on the CPU; the GPU's probes stood in for (with
    `dropped`, its sets dropped after the checks and made again for timing).
    Five rounds: the fresh-set verdict is a median over them, and over three the host clock's noise on a busy
    2-core machine once put the honest toy's first calls at 1.9x (the full suite, 2026-12-04)."""
    ev = Evaluation(toy_task, candidate, EvalOptions(device="cpu", rounds=5, batch_ms=40))
    monkeypatch.setattr(ev, "gpu_uncontended", lambda workload, wr: True)
    monkeypatch.setattr(ev, "gpu_ceilings", lambda: {"copy_bytes_per_s": 1e15, "bf16_flops_per_s": 1e18})
    monkeypatch.setattr(ev, "quiet", lambda workload, wr, ceiling, wait_s, when: 1.0)
    monkeypatch.setattr(ev, "check_unaccounted_time", lambda workload, wr: None)  # host overheads: not the GPU's
    workload = toy_task.workload("n200")
    ev.wr = WorkloadResult("n200", "scored")
    try:
        trusted, cand = ev.spawn("trusted"), ev.spawn("candidate")
        ev.gpu = True  # what makes the trusted worker load the expert for timing
        ev.start_trusted(trusted)
        ev.gpu = False
        assert ev.start_candidate(cand), ev.result.detail
        ev.prepare_workload(workload)
        ev.check_workload(workload, ev.wr)
        assert ev.result.verdict == "pass", ev.result.detail
        if dropped:  # as the evaluation does between a workload's correctness and its timing
            ev.drop(workload, keep_results=True)
        ev.time_workload(workload, ev.wr)
    finally:
        ev.close()
    return ev


def test_the_expert_is_timed_with_the_fresh_set_and_passes(toy_task, monkeypatch):
    ev = timed(toy_task, toy_task.expert_path, monkeypatch)
    assert ev.result.failures == []
    assert set(ev.wr.timings) == {"reference", "candidate", "expert"}
    sets, rounds = toy_task.correctness_sets, ev.options.rounds
    assert set(ev.inputs["n200"]) == set(range(sets + rounds + 1))  # a fresh set for every timed round...
    oracle_for = set(ev.expected["n200"]) - set(range(sets + 1))
    assert len(oracle_for) == 1 and oracle_for < set(ev.inputs["n200"])  # ...the checked round's with its oracle
    assert sorted(ev.slot_set["n200"].values()) == [1, 2, sets]  # each put back after its round
    assert len(ev.wr.fresh_slowdown) == rounds
    assert ev.wr.fraction_of_expert is not None


def test_sets_dropped_after_correctness_are_made_again_for_timing(toy_task, monkeypatch):
    """One workload's sets on the card at a time: timing makes the correctness sets again from their seeds and puts
    into each candidate slot the set it held; the oracle's outputs kept from the checks still match them."""
    ev = timed(toy_task, toy_task.expert_path, monkeypatch, dropped=True)
    assert ev.result.failures == [] and ev.wr.fraction_of_expert is not None
    assert sorted(ev.slot_set["n200"].values()) == [1, 2, toy_task.correctness_sets]
    assert {i for (name, i) in ev.fingerprints if name == "n200"} == set(ev.inputs["n200"])


def test_a_task_whose_sets_are_not_a_function_of_the_seed_cannot_be_timed(toy_task, monkeypatch, tmp_path):
    """Its sets made again for timing differ from those the oracle answered: an infra error naming the task's
    make_inputs, not a verdict on the candidate."""
    from d2kbench.suite import load_task

    task_dir = tmp_path / "toy_axpy"
    shutil.copytree(toy_task.path, task_dir)
    reference = task_dir / "reference.py"
    source = reference.read_text()
    assert source.count("    return x, y, alpha\n") == 1
    drift = "    MADE.append(1)\n    return x + len(MADE), y, alpha\n"  # each set made differs from the last
    reference.write_text(source.replace("    return x, y, alpha\n", drift) + "\nMADE = []\n")
    drifting = load_task(task_dir)
    with pytest.raises(InfraError, match="make_inputs made a different input set 0 of workload n200"):
        timed(drifting, drifting.expert_path, monkeypatch, dropped=True)


def test_a_cache_keyed_by_the_inputs_contents_is_caught(toy_task, monkeypatch, tmp_path):
    """gpu_content_cache.py, its honest path shortened for the interpreter (16 launches instead of 64): correct on
    every set, fast on the sets it has seen, slow on its first call on the fresh one."""
    source = (PLANTED / "gpu_content_cache.py").read_text()
    assert source.count("REPEAT = 64") == 1
    planted = tmp_path / "content_cache.py"
    planted.write_text(source.replace("REPEAT = 64", "REPEAT = 16"))
    ev = timed(toy_task, planted, monkeypatch)
    assert [(f.verdict, f.reason) for f in ev.result.failures] == [("integrity", "input_cache")]


def test_a_cache_that_works_new_contents_out_ahead_is_caught(toy_task, monkeypatch, tmp_path):
    """gpu_content_cache_lookahead.py: every call works out the new contents of any slot it holds. The fresh set is
    written after the warm-up and called first, so its own call is the first to see it and pays for it."""
    source = (PLANTED / "gpu_content_cache_lookahead.py").read_text()
    assert source.count("REPEAT = 64") == 1
    planted = tmp_path / "content_cache_lookahead.py"
    planted.write_text(source.replace("REPEAT = 64", "REPEAT = 16"))
    ev = timed(toy_task, planted, monkeypatch)
    assert [(f.verdict, f.reason) for f in ev.result.failures] == [("integrity", "input_cache")]


@pytest.mark.parametrize("planted", ["timed_pointer_cache.py"])
def test_a_pointer_cache_still_gives_wrong_timed_outputs(toy_task, monkeypatch, planted):
    """The fresh set is written in place, at the addresses the candidate has seen: a cache keyed by pointer
    answers it with the old outputs."""
    ev = timed(toy_task, PLANTED / planted, monkeypatch)
    assert ("incorrect", "timed_output_mismatch") in [(f.verdict, f.reason) for f in ev.result.failures]
