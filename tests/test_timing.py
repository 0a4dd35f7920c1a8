"""The Timer's order of operations per timed call, on the CPU with CUDA's calls recorded (timing itself
needs a GPU: bench/results holds what it measured there)."""

import types

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
    assert timed == [step for slot in (4, 5, 4)
                     for step in ("restore", "flush", ("sleep", cycles), "start", ("call", slot), "end")]
