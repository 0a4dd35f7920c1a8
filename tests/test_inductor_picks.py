"""The comparator's Inductor kernels: each configuration timed by the harness, the fastest kept
(`evaluate/inductor_picks.py`). Inductor's own Triton kernels need a GPU; these tests drive the same code with
stand-ins for its autotuners and launchers, and check the patches on the real `CachingAutotuner`."""

from __future__ import annotations

import time
import types

import pytest
import torch
import torch._inductor.config as inductor_config
import triton
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.triton_heuristics import CachingAutotuner

from d2kbench.evaluate import inductor_picks
from d2kbench.evaluate.worker import Worker
from tests.conftest import started_evaluation


class Launcher:
    """A compiled configuration: Inductor keys its timings by launcher object."""

    def __init__(self, config: str) -> None:
        self.config = config


def autotuner(name: str, inductor_ms: dict) -> tuple[types.SimpleNamespace, dict]:
    """A tuned kernel as Inductor leaves it: its fastest launcher by its own timing the only one left."""
    timings = {Launcher(config): ms for config, ms in inductor_ms.items()}
    tuner = types.SimpleNamespace(inductor_meta={"kernel_name": name}, launchers=[min(timings, key=timings.get)])
    return tuner, timings


def test_each_kernel_keeps_the_configuration_the_harness_times_fastest_not_inductors_pick():
    # Inductor timed XBLOCK=64 fastest; under the harness's replays it is the slowest of the three
    a, a_times = autotuner("triton_red_a", {"XBLOCK=64": 0.0040, "XBLOCK=128": 0.0042, "XBLOCK=256": 0.0043})
    b, b_times = autotuner("triton_poi_b", {"num_warps=4": 0.0010, "num_warps=8": 0.0011})
    cost = {"XBLOCK=64": 5.8, "XBLOCK=128": 4.3, "XBLOCK=256": 4.5, "num_warps=4": 1.0, "num_warps=8": 0.5}
    calls = []

    def time_once() -> float:  # the whole comparator: both kernels as they are set now
        calls.append((a.launchers[0].config, b.launchers[0].config))
        return cost[a.launchers[0].config] + cost[b.launchers[0].config]

    picks = inductor_picks.retune([(a, a_times), (b, b_times)], time_once, rounds=3)

    assert [p.kept for p in picks] == ["XBLOCK=128", "num_warps=8"]
    assert [p.inductor_pick for p in picks] == ["XBLOCK=64", "num_warps=4"]
    assert a.launchers[0].config == "XBLOCK=128" and b.launchers[0].config == "num_warps=8"
    assert picks[0].kernel == "triton_red_a"
    assert picks[0].inductor_ms == {"XBLOCK=64": 0.0040, "XBLOCK=128": 0.0042, "XBLOCK=256": 0.0043}
    assert picks[0].harness_ms == {"XBLOCK=64": 6.8, "XBLOCK=128": 5.3, "XBLOCK=256": 5.5}  # with b's first
    # the second kernel is timed with the first at its kept configuration
    assert picks[1].harness_ms == {"num_warps=4": 5.3, "num_warps=8": 4.8}
    # three batches per configuration, each round's order the last one's reversed
    assert len(calls) == 3 * 3 + 3 * 2
    assert [c[0] for c in calls[:9]] == ["XBLOCK=64", "XBLOCK=128", "XBLOCK=256", "XBLOCK=256", "XBLOCK=128",
                                         "XBLOCK=64", "XBLOCK=64", "XBLOCK=128", "XBLOCK=256"]
    assert picks[0].to_json()["kept"] == "XBLOCK=128"


def test_inductors_pick_stays_where_the_batches_do_not_separate_it_from_a_lower_median():
    # muon's batch: a pointwise kernel's two configurations on a comparator of milliseconds, the batches' spread
    # wider than their difference; the lower median alone must not replace what Inductor timed faster
    a, times = autotuner("k", {"inductor": 0.103, "other": 0.128})
    draws = {"inductor": iter([9.79, 9.52, 9.80]), "other": iter([9.56, 9.60, 9.55])}
    picks = inductor_picks.retune([(a, times)], lambda: next(draws[a.launchers[0].config]))
    assert picks[0].kept == picks[0].inductor_pick == "inductor"
    assert picks[0].harness_ms == {"inductor": 9.79, "other": 9.56}
    assert a.launchers[0].config == "inductor"


def test_of_the_configurations_clearly_faster_than_inductors_pick_the_lowest_median_is_kept():
    a, times = autotuner("k", {"pick": 1.0, "close": 1.1, "far": 1.2, "spread": 1.3})
    draws = {"pick": iter([6.0, 5.9, 6.1]), "close": iter([5.8, 5.7, 5.8]), "far": iter([4.4, 4.5, 4.6]),
             "spread": iter([4.0, 6.0, 4.0])}  # the lowest median, but one batch no faster than the pick's fastest
    picks = inductor_picks.retune([(a, times)], lambda: next(draws[a.launchers[0].config]))
    assert picks[0].kept == "far"
    assert picks[0].harness_ms == {"pick": 6.0, "close": 5.8, "far": 4.5, "spread": 4.0}


def test_kernels_whose_configurations_cannot_move_a_long_comparator_keep_inductors_pick_untimed():
    # muon's 128 x 768 x 2048 batch (9.4 ms a call): a pointwise kernel Inductor timed 25 us apart, another 108 us
    close, close_times = autotuner("triton_poi_mul_3", {"XBLOCK=1024": 0.103, "XBLOCK=512": 0.128})
    apart, apart_times = autotuner("triton_poi_norm_2", {"XBLOCK=1024": 0.268, "XBLOCK=512": 0.376})
    timed = []

    def time_once() -> float:
        timed.append((close.launchers[0].config, apart.launchers[0].config))
        return 9.4

    picks = inductor_picks.retune([(close, close_times), (apart, apart_times)], time_once, comparator_ms=9.4)
    assert {c for c, _ in timed} == {"XBLOCK=1024"}  # the close kernel never left Inductor's pick
    assert {a for _, a in timed} == {"XBLOCK=1024", "XBLOCK=512"} and len(timed) == 6
    assert picks[0].kept == "XBLOCK=1024" and picks[0].harness_ms == {}
    assert picks[0].note == ("not timed: its configurations within 25.0 us of each other by Inductor's timing, "
                             "under 1% of the comparator's 9.40 ms a call")
    assert picks[1].note == "" and len(picks[1].harness_ms) == 2


@pytest.mark.parametrize(("spread_ms", "comparator_ms", "timed"), [
    (0.083, 9.4, False),  # 83 us and a launch's 10 us under 94 us: cannot move the comparator by 1%
    (0.085, 9.4, True),   # a launch's overhead in Inductor's timing could hide enough to
    (0.0016, 0.0044, True),  # quant's M=8: Inductor 14.0-15.6 us for configurations of 4.4-6.0 us in the harness
    (0.0, None, True),  # graph replays: no call time to weigh against
])
def test_a_kernel_is_timed_where_inductors_spread_and_a_launch_could_reach_a_percent(spread_ms, comparator_ms, timed):
    kernel, times = autotuner("k", {"a": 0.014, "b": 0.014 + spread_ms})
    calls = []
    inductor_picks.retune([(kernel, times)], lambda: calls.append(1) or 1.0, comparator_ms=comparator_ms)
    assert bool(calls) == timed


def test_configurations_inductor_could_not_time_are_left_out_and_one_left_is_not_timed():
    a, times = autotuner("k", {"spills": float("inf"), "ok": 1.0})
    calls = []
    picks = inductor_picks.retune([(a, times)], lambda: calls.append(1) or 1.0)
    assert calls == []  # nothing to choose between
    assert picks[0].kept == picks[0].inductor_pick == "ok" and picks[0].harness_ms == {}
    assert picks[0].inductor_ms["spills"] == float("inf")


def static_launcher() -> tuple[Launcher, list[int]]:
    """A launcher as newer Inductors make them: its kernel's module, closed by `_close_static_launcher`."""
    closed: list[int] = []

    class StaticKernel:
        def run(self) -> None: ...

        def close(self) -> None:
            closed.append(1)

    static = Launcher("a")
    static._is_static = True
    static.__globals__ = {"runner": StaticKernel().run}
    return static, closed


def test_recording_lists_what_inductor_tuned_bypasses_the_autotune_cache_and_restores_the_autotuner(monkeypatch):
    tuned_by_inductor = {Launcher("a"): 2.0, Launcher("b"): 1.0}
    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", lambda self, *a, **k: dict(tuned_by_inductor))
    before = dict(CachingAutotuner.__dict__)
    check_cache = triton_heuristics.check_autotune_cache
    kernel = object()
    configs = [triton.Config({"XBLOCK": 8}), triton.Config({"XBLOCK": 32})]
    assert not inductor_config.force_disable_caches
    with inductor_picks.recording() as tuned:
        # every process tunes: no pick read from an earlier one's autotune cache, whatever meta an FX-cached
        # graph's kernel carries; the FX graph cache itself stays on (it saves the compilation)
        kept, cache, info = triton_heuristics.check_autotune_cache(configs, "/no/such/kernel.py",
                                                                   {"autotune_local_cache": True})
        assert kept == configs and cache is None and info["autotune_cache_state"] == "force_disabled"
        assert not inductor_config.force_disable_caches
        assert CachingAutotuner.benchmark_all_configs(kernel, "arg") == tuned_by_inductor
        if "_close_static_launcher" in before:  # newer Inductors close the losers' launchers once tuned...
            static, closed = static_launcher()
            CachingAutotuner._close_static_launcher(static)
            assert closed == []  # ...which must stay loaded here, to be timed again
    if "_close_static_launcher" in before:
        CachingAutotuner._close_static_launcher(static)
        assert closed == [1]  # (the stand-in is one the real method closes)
    assert tuned == [(kernel, tuned_by_inductor)]
    assert triton_heuristics.check_autotune_cache is check_cache
    for name in ("benchmark_all_configs", "_close_static_launcher", "_release_static_launchers_except"):
        assert CachingAutotuner.__dict__.get(name) is before.get(name)


def test_the_autotune_cache_is_read_by_every_compilation_outside_the_recording(monkeypatch):
    """The bypass is the recording's own: Inductor's lookup itself is left as it was (a stand-in that hits)."""
    hits = lambda configs, filename, meta: (configs if meta.get("force_disable_caches") else configs[:1], None, {})
    monkeypatch.setattr(triton_heuristics, "check_autotune_cache", hits)
    with inductor_picks.recording():
        assert triton_heuristics.check_autotune_cache(["a", "b"], "k.py", {})[0] == ["a", "b"]
    assert triton_heuristics.check_autotune_cache(["a", "b"], "k.py", {})[0] == ["a"]


def test_an_inductor_without_the_autotune_cache_lookup_compiles_with_every_cache_off(monkeypatch):
    monkeypatch.delattr(triton_heuristics, "check_autotune_cache")
    with inductor_picks.recording():
        assert inductor_config.force_disable_caches
    assert not inductor_config.force_disable_caches


def test_recording_restores_the_autotuner_when_the_compilation_fails(monkeypatch):
    original = CachingAutotuner.__dict__["benchmark_all_configs"]
    try:
        with inductor_picks.recording():
            raise RuntimeError("the comparator failed to compile")
    except RuntimeError:
        pass
    assert CachingAutotuner.__dict__["benchmark_all_configs"] is original
    assert not inductor_config.force_disable_caches


def test_the_trusted_worker_tunes_its_comparator_on_its_own_timing_of_the_slots_it_is_given(tmp_path, monkeypatch):
    """`Worker.tune_comparator`: the comparator's first call inside the recording (here it "tunes" one kernel as
    Inductor would), then each configuration timed by the worker's timer over whole comparator calls."""
    kernel = types.SimpleNamespace(inductor_meta={"kernel_name": "triton_per_fused_amax"}, launchers=[])
    slow, fast = Launcher("XBLOCK=1"), Launcher("XBLOCK=2")
    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", lambda self, *a, **k: {slow: 1.0, fast: 2.0})
    prepared, runs = [], []

    def comparator(x: torch.Tensor) -> torch.Tensor:
        if not kernel.launchers:  # the first call: compiled and tuned; Inductor keeps what it timed fastest
            kernel.launchers = [min(timings := CachingAutotuner.benchmark_all_configs(kernel), key=timings.get)]
        runs.append(kernel.launchers[0].config)
        time.sleep(0.004 if kernel.launchers[0] is slow else 0.0)  # the harness sees the other way round
        return x + 1

    worker = Worker("trusted", tmp_path, "cpu")
    worker.reference_module = types.SimpleNamespace(comparator_prepare=lambda x: prepared.append(x) or (x,))
    worker.functions["comparator"] = comparator
    for slot in (1, 2):
        worker._store(slot, [torch.full((4,), float(slot))])
    reply = worker.tune_comparator({"slots": [1, 2], "graph": False, "batch_ms": 5.0, "reps": [3, 200],
                                    "warmup": 1})
    (pick,) = reply["picks"]
    assert pick["kernel"] == "triton_per_fused_amax"
    assert pick["inductor_pick"] == "XBLOCK=1" and pick["kept"] == "XBLOCK=2"
    assert pick["harness_ms"]["XBLOCK=1"] > 3.0 > pick["harness_ms"]["XBLOCK=2"]
    assert kernel.launchers == [fast] and len(prepared) == 2
    assert set(reply["seconds"]) == {"first_call", "batches"}
    assert reply["seconds"]["batches"] > 3 * 3 * 0.004  # at least the slow configuration's calls
    assert runs.count("XBLOCK=1") >= 3 * 3  # at least the smallest batch, three times
    assert not inductor_config.force_disable_caches


def test_a_worker_without_a_comparator_or_with_nothing_tuned_keeps_what_it_has(tmp_path):
    worker = Worker("trusted", tmp_path, "cpu")
    assert worker.tune_comparator({"slots": [1]}) == {"picks": []}
    worker.reference_module = types.SimpleNamespace()
    worker.functions["comparator"] = lambda x: x * 2  # eager: Inductor tunes nothing
    worker._store(1, [torch.ones(4)])
    reply = worker.tune_comparator({"slots": [1], "graph": False, "batch_ms": 5.0, "reps": [3, 200], "warmup": 1})
    assert reply["picks"] == [] and set(reply["seconds"]) == {"first_call"}


def test_a_configuration_is_described_by_its_blocks_warps_and_stages():
    import triton

    assert inductor_picks.describe(triton.Config({"XBLOCK": 8, "R0_BLOCK": 512}, num_warps=2, num_stages=1)) == \
        "XBLOCK=8 R0_BLOCK=512 warps=2 stages=1"
    assert inductor_picks.describe("anything else") == "anything else"


def test_a_torch_whose_inductor_lacks_the_autotuner_keeps_inductors_picks_and_says_why(tmp_path, monkeypatch):
    monkeypatch.delattr(CachingAutotuner, "benchmark_all_configs")
    worker = Worker("trusted", tmp_path, "cpu")
    worker.reference_module = types.SimpleNamespace()
    calls = []
    worker.functions["comparator"] = lambda x: calls.append(1) or x * 2
    worker._store(1, [torch.ones(4)])
    reply = worker.tune_comparator({"slots": [1], "graph": False, "batch_ms": 5.0, "reps": [3, 200], "warmup": 1})
    assert reply["picks"] == [] and "benchmark_all_configs not found" in reply["untuned"]
    assert calls == []  # it is timed as before, untouched


def test_a_worker_says_when_it_times_a_comparator_it_never_tuned(tmp_path):
    """A trusted worker started again after the tuning (a retried request) compiles the comparator afresh in
    Inductor's own configurations: its comparator batches say so."""
    worker = Worker("trusted", tmp_path, "cpu")
    worker.reference_module = types.SimpleNamespace()
    worker.functions["comparator"] = lambda x: x * 2
    worker._store(1, [torch.ones(4)])
    timed = {"fn": "comparator", "slots": [1], "reps": 3, "warmup": 1}
    assert worker.time(timed)["comparator_untuned"] is True
    worker.tune_comparator({"slots": [1], "graph": False, "batch_ms": 5.0, "reps": [3, 200], "warmup": 1})
    assert "comparator_untuned" not in worker.time(timed)


def test_the_parent_notes_once_that_a_comparator_ran_untuned(toy_task, monkeypatch):
    from d2kbench.evaluate import hardware
    from d2kbench.evaluate.result import WorkloadResult
    from d2kbench.evaluate.timing_phase import UNTUNED_COMPARATOR

    monkeypatch.setattr(hardware, "ceilings", lambda device, request: {"copy_bytes_per_s": 1e6})
    with started_evaluation(toy_task) as ev:
        def trusted_request(message, timeout=None, original=ev.trusted_request):
            if message["op"] == "time":  # timing itself needs a GPU
                return {"times_ms": [0.1, 0.1], "comparator_untuned": True}
            return original(message, timeout)

        ev.trusted_request = trusted_request
        wr = WorkloadResult("n200", "cpu")
        for fn in ("reference", "comparator", "comparator"):
            assert ev.timed_batch(toy_task.workload("n200"), wr, fn, ev.trusted, [0], 2, graph=False,
                                  validate=False) == [0.1, 0.1]
        assert wr.errors == [UNTUNED_COMPARATOR]
