"""The Timer's order of operations per timed call, on the CPU with CUDA's calls recorded (timing itself
needs a GPU: bench/results holds what it measured there)."""

import types

import pytest
import torch

from d2kbench.evaluate import timing


def test_each_call_is_flushed_then_given_a_head_start_then_timed(monkeypatch):
    log, made, reps = [], [], 3

    class Event:  # the Timer makes all start events, then all end events
        def __init__(self, enable_timing):
            self.name = "start" if len(made) < reps else "end"
            made.append(self)

        def record(self):
            log.append(self.name)

        def elapsed_time(self, other):
            return 0.5

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(("sleep", cycles)))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(clock_rate=1_000_000))
    timer = timing.Timer(torch.device("cpu"))
    monkeypatch.setattr(timer, "flush", lambda: log.append("flush"))
    times, outputs = timer.time(lambda slot: log.append(("call", slot)) or slot, lambda slot: log.append("restore"),
                                slots=[4, 5], reps=reps, warmup=2, graph=False)
    assert times == [0.5, 0.5, 0.5] and outputs == {4: 4, 5: 5}
    timed = log[4:]  # after the warm-up: restore, call twice
    cycles = int(timing.HEAD_START_S * 1e9)  # 200 us at 1 GHz
    first = int(timing.FIRST_HEAD_START_S * 1e9)  # 2 ms: the first timed call follows the warm-up's synchronize
    assert timed == [step for i, slot in enumerate((4, 5, 4))
                     for step in ("restore", "flush", ("sleep", first if i == 0 else cycles), "start",
                                  ("call", slot), "end")]


def test_the_flush_reads_the_whole_buffer_and_writes_none_of_it(monkeypatch):
    """The L2 is evicted by a read: a write would leave an L2 of dirty lines for the timed call to write back (the
    128k attention sequence 8% slower on an H100, bench/results/2026-12-05-h100-owed-23 flush_dirty)."""
    monkeypatch.setattr(timing, "L2_FLUSH_BYTES", 4096)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(clock_rate=1_000_000))
    timer = timing.Timer(torch.device("cpu"))
    timer.flush_buffer.copy_(torch.arange(1024, dtype=torch.int32).flip(0))
    before = timer.flush_buffer.clone()
    timer.flush()
    assert torch.equal(timer.flush_buffer, before)  # nothing written
    assert timer.flush_sink.item() == 1023  # its largest value, at the buffer's start: every element was read


def test_wait_quiet_probes_until_the_queued_work_has_drained():
    """With the candidate stopped, work it queued before the stop still runs: the probe waits it out."""
    rates, now = iter([1.0, 2.0, 9.0, 9.5]), [0.0]

    def clock():
        now[0] += 0.25
        return now[0]

    rate, waited = timing.wait_quiet(lambda: next(rates), min_rate=8.0, wait_s=5.0, clock=clock)
    assert (rate, waited) == (9.0, 0.5)  # three probes, stopped at the first quiet one; the first is no wait


def test_wait_quiet_gives_up_after_its_wait_with_the_last_rate():
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    probes = []
    rate, waited = timing.wait_quiet(lambda: probes.append(1) or 3.0, min_rate=8.0, wait_s=2.5, clock=clock)
    assert (rate, waited, len(probes)) == (3.0, 3.0, 4)
    assert timing.wait_quiet(lambda: 3.0, min_rate=8.0, wait_s=0.0, clock=clock) == (3.0, 0.0)  # one probe


def test_ceilings_far_below_the_nameplate_are_refused_and_never_cached(tmp_path, monkeypatch):
    """Every contention check compares against the cached ceilings: a GPU shared while they were measured
    would lower them for good."""
    from d2kbench.evaluate import hardware

    monkeypatch.setattr(hardware, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(name="NVIDIA H200"))
    shared = {"copy_bytes_per_s": 1.0e12, "bf16_flops_per_s": 7.5e14}
    with pytest.raises(hardware.SharedGpu, match="it is shared"):
        hardware.ceilings("cuda:0", lambda message: {"ceilings": shared})
    assert not list(tmp_path.iterdir())
    good = {"copy_bytes_per_s": 4.2e12, "bf16_flops_per_s": 7.5e14}
    assert hardware.ceilings("cuda:0", lambda message: {"ceilings": good}) == good
    assert hardware.ceilings("cuda:0", lambda message: pytest.fail("measured twice")) == good  # cached


def test_persisting_l2_is_read_and_cleared_through_the_driver(monkeypatch):
    """The worker zeroes the carve-out before a timed batch and reads it after (a fake driver here)."""
    from d2kbench.evaluate import l2

    calls, limit = [], {"value": 30 << 20}

    class Driver:
        def cuCtxGetLimit(self, pointer, which):
            calls.append(("get", which.value))
            pointer._obj.value = limit["value"]
            return 0

        def cuCtxSetLimit(self, which, value):
            calls.append(("set", which.value, value.value))
            limit["value"] = value.value
            return 0

        def cuCtxResetPersistingL2Cache(self):
            calls.append(("reset",))
            return 0

    monkeypatch.setattr(l2, "driver", lambda: Driver())
    assert l2.persisting_l2_bytes() == 30 << 20
    l2.clear_persisting_l2()
    assert l2.persisting_l2_bytes() == 0
    assert calls == [("get", 6), ("set", 6, 0), ("reset",), ("get", 6)]
    monkeypatch.setattr(l2, "driver", lambda: None)  # no CUDA driver: nothing to read, nothing to clear
    assert l2.persisting_l2_bytes() is None and l2.clear_persisting_l2() is None
