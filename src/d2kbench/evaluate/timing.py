"""GPU timing inside a worker: CUDA events around each call (inside the graph for graph replays), L2 flushed, a
head start for the host, inputs rotated."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from d2kbench.evaluate.integrity import poison_

L2_FLUSH_BYTES = 256 << 20  # several times the H200's 60 MB L2
# A GPU sleep queued after the flush, before the start event, so that the call's first launch is queued before
# the GPU reaches the start event: without it the event time included a varying share of the host's launch time
# (attention's expert spends 126-142 us of host time per call for a 107 us kernel, the flush covers about 80 us,
# and its medians wandered over 117-154 us; with the sleep 106.7-108.4 us: bench/results/2026-12-03-h200-owed
# call4). Host time between the call's launches still counts, as it would in an eager program.
HEAD_START_S = 200e-6
# ...and a longer one before a batch's first timed call, which follows the warm-up's synchronize (the GPU idle,
# the host's side of the call cold): with 200 us it ran 0.1-0.9 ms over the batch's other calls for every
# function, whatever its kernel's time (bench/results/2026-12-04-h200-owed-14, `fresh_calls`' lead_ms).
FIRST_HEAD_START_S = 2e-3
DEFAULT_CLOCK_KHZ = 1_980_000  # the H200's boost clock, where the device does not report one
PROBE_BYTES = 256 << 20  # the contention probe's copy: past the L2, about 0.13 ms on an H200
# Output blocks held in the caching allocator's pool before a batch's timed calls, beyond one set per slot: a
# call's new outputs while the slot's last ones are still held, and the copy of the fresh set's first output. The
# warm-up drops its outputs, so its pool holds about one set; the timed loop holds one per slot, so the batch's
# first round of calls grew the pool call by call, and the call that outgrew it waited for the driver's
# allocation. That was the fresh set's call (last in the round): honest experts timed as candidates drew
# integrity/input_cache, moe's 13 us dsv3 kernel 24-38 us slower on every fresh set
# (bench/results/2026-12-04-h200-owed-13). The trusted worker's pool, grown by the oracle, hid it there.
SPARE_OUTPUT_SETS = 2


class Timer:
    """Times calls of one function over a rotation of input sets on the current CUDA device."""

    # Graph replays are timed by event nodes inside each graph, around the captured call, so that the GPU's own
    # start of a replay (about 0.9 us after the flush, which evicts the graph's launch data) stays out. Timed from
    # outside, that start made the candidate's worker slower than the trusted one in 102 of 116 pairs, by 0.1-0.35
    # us on average (bench/results/2026-12-03-h200-owed-8, -probe-ab, -ablate); inside, quant m8's fraction of
    # expert was 0.986-1.014 (-graph-events). False times from outside: diagnoses only
    # (bench/diag/latency_process_offset.py).
    graph_events_inside = True

    def __init__(self, device: torch.device):
        self.device = device
        self.flush_buffer = torch.zeros(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.flush_sink = torch.empty((), dtype=torch.int32, device=device)
        clock_khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or DEFAULT_CLOCK_KHZ
        self.head_start_cycles = int(HEAD_START_S * clock_khz * 1e3)
        self.first_head_start_cycles = int(FIRST_HEAD_START_S * clock_khz * 1e3)

    def flush(self) -> None:
        """Evict the L2 by reading a buffer several times its size. A read, not a write: the lines it leaves are
        clean, so the timed call is not charged for writing the flush's own lines back to memory as it evicts them
        (a zero_ of the buffer left up to an L2 of dirty lines, which cost the 128k attention sequence 8% of its
        time on an H100: bench/results/2026-12-05-h100-owed-23, call3)."""
        torch.amax(self.flush_buffer, dim=0, out=self.flush_sink)

    def head_start(self, first: bool = False) -> None:
        """Keep the GPU busy while the host queues the start event and the call (see HEAD_START_S); longer before
        a batch's `first` timed call (FIRST_HEAD_START_S)."""
        torch.cuda._sleep(self.first_head_start_cycles if first else self.head_start_cycles)

    def mark(self) -> torch.cuda.Event:
        """A start or end mark of one timed call."""
        return torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def time(
        self,
        call: Callable[[int], object],
        restore: Callable[[int], None],
        slots: Sequence[int],
        reps: int,
        warmup: int,
        graph: bool,
        before_recheck: Callable[[], None] | None = None,
        unwarmed: int | None = None,
        write_fresh: Callable[[], None] | None = None,
    ) -> tuple[list[float], dict[int, object]]:
        """Milliseconds of `reps` calls (`call(slot)` rotating over `slots`) and the last output per slot.

        With `graph`, one call per slot is captured into a CUDA graph and the replays are timed; with
        `before_recheck` too, the outputs are those of `replay_recheck` instead. The slot `unwarmed` is left out
        of the warm-up, so its first timed call is the first call on what it holds, and its output is a copy of
        that first call's (`first_call_outputs`). `write_fresh` runs after the warm-up (with `graph`: after the
        captures), before the synchronize that precedes the timed calls: what it writes (the round's fresh input set)
        is seen first by a timed call (with `graph`: a timed replay).
        """
        out = None
        for slot in warmup_slots(slots, warmup, unwarmed):  # (a graph's capture is preceded by one call per slot)
            restore(slot)
            out = call(slot)
        if graph:
            self.synchronize()
            return self.time_graphs(call, restore, slots, reps, before_recheck, write_fresh)
        if write_fresh is not None:
            write_fresh()
        reserve_output_blocks(out, len(slots) + SPARE_OUTPUT_SETS)
        del out
        self.synchronize()
        outputs: dict[int, object] = {}
        first: dict[int, object] = {}
        starts = [self.mark() for _ in range(reps)]
        ends = [self.mark() for _ in range(reps)]
        for i in range(reps):
            slot = slots[i % len(slots)]
            restore(slot)
            self.flush()
            self.head_start(first=(i == 0))
            starts[i].record()
            outputs[slot] = call(slot)
            ends[i].record()
            first_call_outputs(first, slot, unwarmed, outputs[slot])
        self.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)], {**outputs, **first}

    def time_graphs(
        self, call: Callable[[int], object], restore: Callable[[int], None], slots: Sequence[int], reps: int,
        before_recheck: Callable[[], None] | None, write_fresh: Callable[[], None] | None = None,
    ) -> tuple[list[float], dict[int, object]]:
        """`time` with `graph`: each slot's call captured once (after one uncaptured call on the capture's side
        stream, so that lazy initialisation stays out of the graph), then replayed `reps` times in rotation.
        `write_fresh` writes a set in place over one slot's captured inputs between the captures and the replays:
        no call before the first replay of that slot has seen it, so a cache of outputs kept on the device and
        keyed by the inputs' contents must work it out in that timed replay."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for slot in slots:
                restore(slot)
                call(slot)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        inside = self.graph_events_inside
        graphs: dict[int, torch.cuda.CUDAGraph] = {}
        marks: dict[int, list[torch.cuda.Event]] = {}  # the event nodes of each graph (`graph_events_inside`)
        outputs: dict[int, object] = {}
        for slot in slots:
            restore(slot)
            graphs[slot] = torch.cuda.CUDAGraph()
            marks[slot] = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(2 * inside)]
            with torch.cuda.graph(graphs[slot]):
                if inside:
                    marks[slot][0].record()
                outputs[slot] = call(slot)
                if inside:
                    marks[slot][1].record()
        if write_fresh is not None:
            write_fresh()
        torch.cuda.synchronize(self.device)
        times: list[float] = []
        outside = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(0 if inside else reps)]
        for i in range(reps):
            slot = slots[i % len(slots)]
            restore(slot)
            self.flush()
            if inside:  # every replay records the same two events again: read them before the next
                graphs[slot].replay()
                marks[slot][1].synchronize()
                times.append(marks[slot][0].elapsed_time(marks[slot][1]))
            else:
                self.head_start()
                outside[i][0].record()
                graphs[slot].replay()
                outside[i][1].record()
        torch.cuda.synchronize(self.device)
        times += [start.elapsed_time(end) for start, end in outside]
        if before_recheck is not None:
            before_recheck()
            self.replay_recheck(graphs, outputs, restore)
        return times, outputs

    def replay_recheck(self, graphs: dict[int, torch.cuda.CUDAGraph], outputs: dict[int, object],
                       restore: Callable[[int], None]) -> None:
        """One more replay per slot, its outputs poisoned first: after `before_recheck` moved the input sets
        between the slots, the outputs must be computed from them by the replay itself. A graph that copies
        results its call worked out while it was captured (or captured nothing at all) leaves stale values or
        the poison behind."""
        for slot, g in graphs.items():
            for out in outputs[slot] if isinstance(outputs[slot], tuple) else (outputs[slot],):
                if isinstance(out, torch.Tensor):
                    poison_(out)
            restore(slot)
            g.replay()
        torch.cuda.synchronize(self.device)


def reserve_output_blocks(out: object, copies: int) -> None:
    """Allocate `copies` tensors like each of `out`'s and free them: the timed calls then find their outputs'
    blocks in the caching allocator's pool instead of waiting for the driver (see SPARE_OUTPUT_SETS)."""
    tensors = [o for o in (out if isinstance(out, tuple | list) else (out,)) if isinstance(o, torch.Tensor)]
    held = [torch.empty_like(t) for _ in range(copies) for t in tensors]
    del held


def batch_reps(estimate_ms: float, batch_ms: float, slots: int, bounds: Sequence[int]) -> int:
    """Timed calls for a batch about `batch_ms` long at `estimate_ms` a call: at least one a slot, within `bounds`
    (the fewest, the most)."""
    low, high = bounds
    return max(int(low), slots, min(int(high), int(batch_ms / estimate_ms)))


def warmup_slots(slots: Sequence[int], warmup: int, unwarmed: int | None) -> list[int]:
    """The slots of `warmup` untimed calls, rotating over `slots` but never `unwarmed`."""
    others = [s for s in slots if s != unwarmed]
    return [others[i % len(others)] for i in range(warmup)] if others else []


def first_call_outputs(first: dict[int, object], slot: int, unwarmed: int | None, out: object) -> None:
    """Keep a copy of the unwarmed slot's first output: a candidate that answers the first call on inputs it has
    not seen with anything but their result (to work it out later, or into the same buffer) is checked on that
    answer, not on a later call's. The copy is queued after the call's end mark: it is not timed."""
    if slot != unwarmed or slot in first:
        return
    copies = tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in (out if isinstance(out, tuple) else (out,)))
    first[slot] = copies if isinstance(out, tuple) else copies[0]


class HostMark:
    """A CUDA event's part in `Timer.time`, read from the host clock."""

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: HostMark) -> float:
        return (end.at - self.at) * 1e3


class HostTimer(Timer):
    """`Timer` on a CPU (the interpreter): the same rounds, each call timed by the host clock, nothing flushed, no
    CUDA graphs. An evaluation never times on a CPU; the tests use it to run the parent's timing rounds end to end,
    real workers and all, without a GPU."""

    def __init__(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def head_start(self, first: bool = False) -> None:
        pass

    def mark(self) -> HostMark:
        return HostMark()

    def synchronize(self) -> None:
        pass

    def time_graphs(self, *args: object, **kwargs: object) -> tuple[list[float], dict[int, object]]:
        raise RuntimeError("CUDA graphs need a GPU")


def measure_ceilings(device: torch.device) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) and bf16 GEMM rate, measured on `device`."""
    timer = Timer(device)

    def median_ms(fn: Callable[[], object], reps: int = 20) -> float:
        times = []
        for _ in range(3):
            fn()
        for _ in range(reps):
            timer.flush()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return sorted(times)[len(times) // 2]

    n = 1 << 30  # 1 GiB each way
    buffers = [torch.randint(0, 255, (n,), dtype=torch.uint8, device=device)]
    buffers.append(torch.empty_like(buffers[0]))
    copy_ms = median_ms(lambda: buffers[1].copy_(buffers[0]))
    buffers.clear()
    m = 8192
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16, generator=gen)
    gemm_ms = median_ms(lambda: a @ b, reps=10)
    return {
        "copy_bytes_per_s": 2 * n / (copy_ms * 1e-3),
        "bf16_flops_per_s": 2 * m**3 / (gemm_ms * 1e-3),
    }


def wait_quiet(probe: Callable[[], float], min_rate: float, wait_s: float,
               clock: Callable[[], float] = time.monotonic) -> tuple[float, float]:
    """Probe until the rate reaches `min_rate` or `wait_s` has passed since the first probe: (the last rate,
    seconds spent probing after the first).

    With the candidate's process stopped, work it queued on the GPU before the stop still runs; this waits for
    that queue to drain before a baseline is timed (a stopped process can queue nothing more)."""
    rate, start, waited = probe(), clock(), 0.0
    while rate < min_rate and waited < wait_s:
        rate = probe()
        waited = clock() - start
    return rate, waited


def probe_copy_rate(device: torch.device, buffers: list[torch.Tensor], reps: int = 7) -> float:
    """Copy bandwidth (bytes read + written per second) right now: the median of `reps` copies.

    Run beside the timings to see whether anything else shares the GPU (another process, or work a
    paused candidate queued before it was stopped). `buffers` keeps the two probe buffers between calls.
    """
    if not buffers:
        buffers += [torch.empty(PROBE_BYTES, dtype=torch.uint8, device=device) for _ in range(2)]
        buffers[0].fill_(7)
    src, dst = buffers
    seconds = []
    for _ in range(reps + 1):  # the first copy warms up
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) * 1e-3)
        else:
            begin = time.perf_counter()
            dst.copy_(src)
            seconds.append(time.perf_counter() - begin)
    return 2 * PROBE_BYTES / statistics.median(seconds[1:])
