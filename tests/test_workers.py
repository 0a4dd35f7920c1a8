"""Worker mechanics the GPU timing relies on, checked on the CPU: in-place rotation of input sets
and pausing a worker's process group."""

import select
import time

import torch

from d2kbench.evaluate import channel
from d2kbench.evaluate.worker import Worker
from d2kbench.evaluate.workers import WorkerProcess


def test_rotate_moves_input_sets_between_slots_in_place(tmp_path):
    worker = Worker("candidate", tmp_path, "cpu")
    sets = {slot: [torch.full((4,), float(slot)), torch.arange(3) + slot, 0.5 * slot] for slot in (10, 11, 12)}
    for slot, values in sets.items():
        worker._store(slot, values)
    addresses = {slot: [v.data_ptr() for v in worker.slots[slot][:2]] for slot in sets}
    worker.rotate({"slots": [10, 11, 12]})
    for slot, source in ((10, 11), (11, 12), (12, 10)):
        values = worker.slots[slot]
        assert [v.data_ptr() for v in values[:2]] == addresses[slot]  # the same addresses
        assert torch.equal(values[0], torch.full((4,), float(source)))
        assert torch.equal(values[1], torch.arange(3) + source)
        assert values[2] == 0.5 * source
        assert worker._mutated(slot, values) == []  # the pristine copies follow the new contents


def test_mutated_names_the_changed_inputs_only(tmp_path):
    worker = Worker("candidate", tmp_path, "cpu")
    worker.written = (1,)
    values = [torch.zeros(5), torch.zeros(5), torch.zeros(5)]
    worker._store(0, values)
    values[1].add_(1)  # declared as written: allowed
    values[2][3] = -0.0  # a different bit pattern is a change
    assert worker._mutated(0, values) == [2]


def test_a_paused_worker_answers_only_after_it_is_resumed(tmp_path):
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        worker.wait_ready()
        with worker.paused():
            channel.write_message(worker.fd_req, {"op": "drop", "slots": []})
            ready, _, _ = select.select([worker.fd_rep], [], [], 1.0)
            assert not ready  # stopped: no reply
            start = time.monotonic()
        assert channel.read_message(worker.fd_rep) == {"ok": True}
        assert time.monotonic() - start < 30
    finally:
        worker.close()
