"""A worker process: holds inputs on its device and calls one kind of code on request.

Two roles. A `candidate` worker loads one candidate file and calls its `run`, checked or timed;
nothing else of the evaluator is imported here beyond the channel, the integrity checks and the
timer. A `trusted` worker loads the task's `reference.py` and `expert.py`: it makes inputs,
computes the oracle and times the reference, comparator and expert. Requests and replies travel
on a private pipe (see `channel`); the worker's own stdout and stderr go to a log file.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import signal
import statistics
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from d2kbench.evaluate import channel, integrity, interp_bounds, interp_fp8, ipc, l2

_CUDA_FAULT_MARKERS = ("CUDA error", "illegal memory access", "CUBLAS_STATUS", "device-side assert")
_OOM_MARKERS = ("can't allocate memory", "Cannot allocate memory", "CUDA out of memory")


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def as_tuple(out: Any) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def oracle_input(value: Any, upcast: torch.dtype | None) -> Any:
    """A copy of an input for the oracle: bf16/fp16/fp32 tensors upcast to `upcast` (None: kept as they are)."""
    if not isinstance(value, torch.Tensor):
        return value
    if upcast is not None and value.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return value.to(upcast, copy=True)
    return value.clone()


FINGERPRINT_CHUNK = 1 << 24  # elements per step: its int64 temporaries 128 MB each
FINGERPRINT_PERIOD = 65521  # position weights cycle with this prime: products stay below 2**32


def fingerprint(value: Any) -> int | None:
    """A number that changes with a tensor's bytes and their order (None for other values): a set made again
    from its seed must give the same. Not a hash against an adversary: the trusted worker's own sets, compared
    to catch a `make_inputs` whose output is not a function of the seed."""
    if not isinstance(value, torch.Tensor):
        return None
    flat = value.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.numel() % 2 == 0:
        flat = flat.view(torch.int16)
    weights = torch.arange(min(FINGERPRINT_CHUNK, max(flat.numel(), 1)), device=flat.device,
                           dtype=torch.int64).remainder_(FINGERPRINT_PERIOD).add_(1)
    sums = [(part.to(torch.int64) * weights[:part.numel()]).sum() for part in flat.split(FINGERPRINT_CHUNK)]
    total = 0
    for k, chunk_sum in enumerate(torch.stack(sums).tolist() if sums else []):  # one device sync
        total = (total * 1_000_003 + chunk_sum + k) % (2**61 - 1)
    return total


def held_description(value: torch.Tensor) -> dict[str, Any]:
    """A tensor that stays in the trusted worker (lent to the candidate's worker when it needs it): its
    description, without bytes or handle."""
    return {**ipc.bare_description(value), "held": True}


class Worker:
    def __init__(self, role: str, spool: Path, device: str):
        self.role = role
        self.spool = spool
        self.device = torch.device(device)
        self.slots: dict[int, list[Any]] = {}
        self.pristine: dict[int, dict[int, torch.Tensor]] = {}
        self.written: tuple[int, ...] = ()
        self.functions: dict[str, Any] = {}
        self.prepared: dict[int, tuple] = {}
        self.timer = None
        self.comparator_tuned = False  # `tune_comparator` ran in this process (a restarted worker's has not)
        self.probe_buffers: list[torch.Tensor] = []
        self.launches = integrity.TritonLaunches()
        self.stages_s: dict[str, float] = {}  # this request's seconds per stage (reported with the reply)
        self.exporting = False  # this request's results go to the parent device to device (`"export_results"`)
        self.parent_blocks: list[int] = []  # blocks exported to the parent for the last reply (it has cloned them)
        self.lending = ipc.InputLending()  # the trusted worker's blocks for input sets lent to the candidate

    @contextmanager
    def stage(self, name: str):
        """Count the block's seconds in this request's stage `name` (what a slow request spends its time on)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages_s[name] = self.stages_s.get(name, 0.0) + time.perf_counter() - start

    def pack(self, value: Any) -> dict[str, Any]:
        """A result for the parent, its time counted in the stage `pack`: exported device to device where the
        request asked for it (`ipc.export_copy`, the block freed at the next request), else written to the spool."""
        with self.stage("pack"):
            if self.exporting and isinstance(value, torch.Tensor) and value.is_cuda:
                return {**ipc.export_copy(value, owned=self.parent_blocks), "result": True}
            return channel.pack_value(value, self.spool)

    # -- requests ---------------------------------------------------------------------------
    def load(self, req: dict) -> dict:
        self.written = tuple(req.get("written", ()))
        self.upcast = getattr(torch, req.get("upcast", "float32"))
        self.launches.install()
        if self.role == "candidate":
            module = load_module(Path(req["path"]), "candidate")
            if not callable(getattr(module, "run", None)):
                raise AttributeError("the candidate file defines no function run(*inputs)")
            self.functions["run"] = module.run
        else:
            task = Path(req["task_path"])
            ref = load_module(task / "reference.py", "task_reference")
            self.reference_module = ref
            self.functions["reference"] = ref.reference
            self.custom_oracle = hasattr(ref, "oracle")
            self.functions["oracle"] = ref.oracle if self.custom_oracle else ref.reference
            if hasattr(ref, "comparator"):
                self.functions["comparator"] = ref.comparator
            if req.get("load_expert", True):
                self.functions["expert"] = load_module(task / "expert.py", "task_expert").run
        return {}

    def make_inputs(self, req: dict) -> dict:
        from d2kbench.suite.schema import Workload

        workload = Workload(**req["workload"])
        inputs = list(self.reference_module.make_inputs(workload, int(req["seed"]), str(self.device)))
        self._store(int(req["slot"]), inputs)
        derived = {}
        if hasattr(self.reference_module, "derived"):
            derived = {k: float(v) for k, v in self.reference_module.derived(workload, inputs).items()}
        # `export`: the GPU tensors stay here, described (`held_description`); `lend`: lent at once too
        export = bool(req.get("export")) and self.device.type == "cuda"
        descs = [held_description(v) if export and isinstance(v, torch.Tensor) and v.is_cuda else self.pack(v)
                 for v in inputs]
        reply = {"inputs": descs, "derived": derived, "fingerprints": [fingerprint(v) for v in inputs]}
        if export and req.get("lend"):
            reply["lend"] = self.lend_slot(int(req["slot"]))
        return reply

    def lend(self, req: dict) -> dict:
        """The input sets of `slots` lent to the candidate's worker (`ipc.InputLending`)."""
        return {"lends": [self.lend_slot(int(slot)) for slot in req["slots"]]}

    def take_back(self, req: dict) -> None:
        """The lends a request's `release` names, over (the serve loop, before any request's own work): their
        blocks take later lends."""
        self.lending.release([int(i) for i in req.get("release", [])])

    def lend_slot(self, slot: int) -> dict[str, Any]:
        """A slot's inputs lent as they were made: the written ones from their pristine copies (timed calls of
        the reference and expert write the slot's own)."""
        pristine = self.pristine.get(slot, {})
        return self.lending.lend([pristine.get(i, v) if i in self.written else v
                                  for i, v in enumerate(self.slots[slot])])

    def ipc_probe(self, req: dict) -> dict:
        """An exported probe block and the sum of its bytes: the device-to-device route checked before use."""
        probe = torch.arange(4096, device=self.device, dtype=torch.int32).mul_(7).add_(int(req["seed"]))
        return {"input": ipc.export_copy(probe), "sum": int(probe.sum())}

    def ipc_check(self, req: dict) -> dict:
        """The sum of an imported probe block (asked before the candidate's code loads, so it is still ours)."""
        return {"sum": int(ipc.import_clone(req["input"], self.device).sum())}

    def put_inputs(self, req: dict) -> dict:
        values, slot = self._unpack_inputs(req["inputs"]), int(req["slot"])
        if req.get("in_place"):
            self._write_in_place(slot, values)
        else:
            self._store(slot, values)
        return {}

    def _unpack_inputs(self, descs: list[dict]) -> list[Any]:
        values = [ipc.import_clone(d, self.device) if ipc.is_exported(d) else
                  channel.unpack_value(d, self.spool, mapped=True) for d in descs]
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def _write_in_place(self, slot: int, values: list[Any]) -> None:
        """A slot's inputs rewritten at the same addresses (tensors copied into, other values replaced)."""
        old = self.slots[slot]
        for i, (dst, src) in enumerate(zip(old, values, strict=True)):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
            else:
                old[i] = src
        self._store(slot, old)

    def call(self, req: dict) -> dict:
        """One call on a slot's inputs, checked; returns outputs, inputs after the call and findings."""
        fn_name, slot = req["fn"], int(req["slot"])
        inputs = self._inputs_for(fn_name, slot)
        guard = integrity.OpGuard(poison=bool(req.get("poison", False)))
        self.launches.count = 0
        self.launches.names.clear()
        kernels, trace_error = None, None
        with torch.no_grad(), self.stage("run"):
            if req.get("guard", False):
                with guard:
                    if req.get("trace"):
                        out, kernels, trace_error = integrity.traced_call(
                            lambda: self.functions[fn_name](*inputs), self.device)
                    else:
                        out = self.functions[fn_name](*inputs)
            else:
                out = self.functions[fn_name](*inputs)
        outs = as_tuple(out)
        findings: dict[str, Any] = {
            "launches": self.launches.count,
            "trace_error": trace_error,
            "forbidden_ops": dict(guard.forbidden),
            "not_tensor": [i for i, o in enumerate(outs) if type(o) is not torch.Tensor],
            # interpreted kernels' stray accesses, also those whose error the candidate's code caught
            "out_of_bounds": interp_bounds.take(),
        }
        if req.get("guard", False):
            # What the caller's stream sees when it is synchronized, against what lands later.
            with self.stage("late_writes"):
                findings["late_writes"] = integrity.late_writes(outs, inputs, self.written, self.device)
        with self.stage("sync"):
            self._sync()
        with self.stage("checks"):
            if kernels is not None:
                findings["kernels"] = integrity.kernel_findings(kernels, self.launches.names)
            tensors = [o for o in outs if isinstance(o, torch.Tensor)]
            findings["aliasing"] = integrity.aliasing(tensors, inputs)
            if req.get("check_inputs"):
                findings["mutated"] = self._mutated(slot, inputs)
        reply = {
            "outputs": [self.pack(o) for o in outs],
            "findings": findings,
        }
        if req.get("return_inputs"):
            reply["inputs"] = self._written_after(inputs)
        return reply

    def _timer(self) -> Any:
        """This worker's timer, made at its first use: CUDA events, or the host clock on a CPU (only tests time
        there: `HostTimer`)."""
        from d2kbench.evaluate.timing import HostTimer, Timer

        if self.timer is None:
            self.timer = Timer(self.device) if self.device.type == "cuda" else HostTimer()
        return self.timer

    def time(self, req: dict) -> dict:
        fn_name = req["fn"]
        fn = self.functions[fn_name]
        slots = [int(s) for s in req["slots"]]
        if fn_name == "comparator":  # only this batch's slots keep their prepared inputs (earlier rounds' fresh
            # slots would each keep a copy as large as a set: attention's gathered KV, 14 GB over six rounds)
            self.prepared = {s: v for s, v in self.prepared.items() if s in slots}
        for slot in slots:
            self._inputs_for(fn_name, slot)  # prepares comparator inputs outside the timed region

        def call(slot: int) -> object:
            return fn(*self._inputs_for(fn_name, slot))

        l2.clear_persisting_l2()  # whatever an earlier request reserved: every batch starts with none
        cleared = l2.persisting_l2_bytes() or 0  # what the driver reports after the clear (a floor it keeps)
        graph = bool(req.get("graph"))
        # a graph batch's outputs, when asked for, come from one more replay (`Timer.replay_recheck`), after the
        # input sets moved one slot along where the parent asks (`move_sets`; it moves its own record the same way)
        recheck = None
        if graph and req.get("return_outputs"):
            recheck = (lambda: self.rotate({"slots": slots})) if req.get("move_sets") else (lambda: None)
        # the round's fresh set (graph batches: its replay set), written over its slot after the warm-up (graph
        # batches: after the captures; `Timer.time`)
        write_fresh = None
        if req.get("fresh") is not None:
            fresh_slot, fresh_values = int(req["fresh"]["slot"]), self._unpack_inputs(req["fresh"]["inputs"])
            write_fresh = lambda: self._write_in_place(fresh_slot, fresh_values)  # noqa: E731
        with torch.no_grad():
            unwarmed = req.get("unwarmed")
            times, outputs = self._timer().time(
                call, self._restore, slots, int(req["reps"]), int(req.get("warmup", 3)), graph, recheck,
                None if unwarmed is None else int(unwarmed), write_fresh,
            )
        reserved = l2.persisting_l2_bytes() or 0
        reply: dict[str, Any] = {"times_ms": times, "persisting_l2_bytes": reserved if reserved > cleared else 0}
        if fn_name == "comparator" and not self.comparator_tuned:
            reply["comparator_untuned"] = True
        if req.get("return_outputs"):
            reply["outputs"] = {
                str(slot): [self.pack(o) for o in as_tuple(out)]
                for slot, out in outputs.items()
            }
            reply["inputs"] = {str(slot): self._written_after(self.slots[slot]) for slot in outputs}
        return reply

    def tune_comparator(self, req: dict) -> dict:
        """The comparator compiled at its first call, Inductor tuning its kernels, then each kernel Inductor tuned
        in the configuration that this worker's timing of the whole comparator on `slots` finds clearly fastest: graph
        replays with `graph` (where the workload's graph replays are scored), batches of about `batch_ms`
        (`inductor_picks`). On a CPU Inductor's kernels are C++, none tuned (and only tests time there)."""
        if "comparator" not in self.functions:
            return {"picks": []}
        self.comparator_tuned = True
        from d2kbench.evaluate import inductor_picks
        from d2kbench.evaluate.timing import batch_reps

        fn = self.functions["comparator"]
        slots = [int(s) for s in req["slots"]]

        def call(slot: int) -> object:
            return fn(*self._inputs_for("comparator", slot))

        def batch(reps: int, warmup: int, graph: bool) -> float:
            return statistics.median(self._timer().time(call, self._restore, slots, reps, warmup, graph)[0])

        started = time.perf_counter()
        with torch.no_grad():  # as in its timed batches: a compilation's guards include the grad mode
            try:
                with inductor_picks.recording() as tuned:
                    call(slots[0])
            except inductor_picks.Untunable as exc:
                return {"picks": [], "untuned": str(exc)}
            first_call_s = time.perf_counter() - started
            if not tuned:
                return {"picks": [], "seconds": {"first_call": first_call_s}}
            estimate = max(batch(len(slots), 1, False), 1e-3)
            reps = batch_reps(estimate, float(req["batch_ms"]), len(slots), req["reps"])
            graph = bool(req["graph"])
            # (graph replays drop the host's share of an eager call: the estimate would overstate the comparator)
            picks = inductor_picks.retune(tuned, lambda: batch(reps, int(req["warmup"]), graph),
                                          comparator_ms=None if graph else estimate)
        # where the tuning's time goes: the first call (compilation, Inductor's own tuning) and the
        # harness's batches
        seconds = {"first_call": first_call_s, "batches": time.perf_counter() - started - first_call_s}
        return {"picks": [pick.to_json() for pick in picks], "seconds": seconds}

    def compile(self, req: dict) -> dict:
        """Call `run` on a slot with launches replaced by sm_90 compilation; the kernels' reports."""
        from d2kbench.evaluate.sm90 import CompileCapture

        capture = CompileCapture(arch=int(req.get("arch", 90)))
        capture.install()
        try:
            with torch.no_grad():
                self.functions["run"](*self.slots[int(req["slot"])])
        finally:
            capture.uninstall()
        return {"kernels": capture.reports}

    def ceilings(self, req: dict) -> dict:
        from d2kbench.evaluate.timing import measure_ceilings

        return {"ceilings": measure_ceilings(self.device)}

    def probe(self, req: dict) -> dict:
        """The copy bandwidth the GPU gives right now (see `timing.probe_copy_rate`); with `min_rate`, probing
        again until it is reached or `wait_s` has passed (`timing.wait_quiet`)."""
        from d2kbench.evaluate.timing import probe_copy_rate, wait_quiet

        rate, waited = wait_quiet(lambda: probe_copy_rate(self.device, self.probe_buffers),
                                  float(req.get("min_rate", 0.0)), float(req.get("wait_s", 0.0)))
        return {"copy_bytes_per_s": rate, "waited_s": waited}

    def rotate(self, req: dict) -> dict:
        """Shift the input sets one slot along `slots`, in place at the same addresses (slot k gets the
        contents of slot k+1, the last gets the first's): an output cache keyed on pointers goes stale."""
        slots = [int(s) for s in req["slots"]]
        first = [v.clone() if isinstance(v, torch.Tensor) else v for v in self.slots[slots[0]]]
        for dst, src in zip(slots, slots[1:] + [None], strict=True):
            self._write_in_place(dst, first if src is None else self.slots[src])
        return {}

    def memory(self, req: dict) -> dict:
        """This worker's GPU memory: the caching allocator's peak over its life and its reserve now, the blocks it
        lends input sets in (outside the allocator, never freed) and the device's total; nothing on a CPU."""
        if self.device.type != "cuda":
            return {}
        return {"peak_reserved": torch.cuda.max_memory_reserved(self.device),
                "reserved": torch.cuda.memory_reserved(self.device), "exported": self.lending.held_bytes,
                "total": torch.cuda.get_device_properties(self.device).total_memory}

    def drop(self, req: dict) -> dict:
        """Forget the input sets of `slots`."""
        for slot in req["slots"]:
            self.slots.pop(int(slot), None)
            self.pristine.pop(int(slot), None)
            self.prepared.pop(int(slot), None)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return {}

    # -- helpers ------------------------------------------------------------------------------
    def _store(self, slot: int, inputs: list[Any]) -> None:
        """Keep a slot's inputs and a pristine copy: of the written ones (restored before each timed
        call) and, in the candidate's worker, of every tensor (the unchanged-input check)."""
        self.slots[slot] = inputs
        self.prepared.pop(slot, None)
        keep = [i for i, v in enumerate(inputs)
                if isinstance(v, torch.Tensor) and (i in self.written or self.role == "candidate")]
        self.pristine[slot] = {i: inputs[i].clone() for i in keep}

    def _written_after(self, inputs: list[Any]) -> list[dict[str, Any]]:
        """The inputs written in place, as they are now (they are outputs); the others travel as None:
        they are checked here, on the device, against the worker's own copy (`_mutated`)."""
        return [self.pack(v) if i in self.written and isinstance(v, torch.Tensor)
                else {"scalar": None} for i, v in enumerate(inputs)]

    def _mutated(self, slot: int, inputs: list[Any]) -> list[int]:
        """The inputs not declared as written that a call changed, compared bit for bit on the device."""
        return [i for i, before in self.pristine.get(slot, {}).items()
                if i not in self.written and not integrity.same_bytes(before, inputs[i])]

    def _restore(self, slot: int) -> None:
        for i, value in self.pristine.get(slot, {}).items():
            if i in self.written:
                self.slots[slot][i].copy_(value)

    def _inputs_for(self, fn_name: str, slot: int) -> list[Any]:
        inputs = self.slots[slot]
        if fn_name == "oracle":
            # The oracle works on copies: it may write in place, and the slot must stay pristine.
            return [self._oracle_copy(v) for v in inputs]
        if fn_name == "comparator":
            if slot not in self.prepared:
                prepare = getattr(self.reference_module, "comparator_prepare", None)
                self.prepared[slot] = tuple(prepare(*inputs)) if prepare else tuple(inputs)
            return list(self.prepared[slot])
        return inputs

    def _oracle_copy(self, value: Any) -> Any:
        """A copy of an input for the oracle: upcast floats unless the task defines its own oracle."""
        return oracle_input(value, None if self.custom_oracle else self.upcast)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def serve(role: str, fd_in: int, fd_out: int, spool: Path, device: str) -> None:
    worker = Worker(role, spool, device)
    handlers = {
        "load": worker.load,
        "make_inputs": worker.make_inputs,
        "lend": worker.lend,
        "put_inputs": worker.put_inputs,
        "ipc_probe": worker.ipc_probe,
        "ipc_check": worker.ipc_check,
        "call": worker.call,
        "time": worker.time,
        "tune_comparator": worker.tune_comparator,
        "ceilings": worker.ceilings,
        "probe": worker.probe,
        "compile": worker.compile,
        "drop": worker.drop,
        "memory": worker.memory,
        "rotate": worker.rotate,
    }
    channel.write_message(fd_out, {"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        try:
            req = channel.read_message(fd_in)
        except channel.ChannelClosed:
            return
        op = req.get("op")
        if op == "exit":
            if req.get("fast"):  # nothing left to say: skip the interpreter's teardown (about 0.7 s with torch)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            return  # a profiler in front (ncu) may still collect at the process's orderly exit
        try:
            if op not in handlers:
                raise ValueError(f"unknown request {op!r}")
            ipc.free_blocks(worker.parent_blocks)  # the parent cloned them before it sent this request
            worker.take_back(req)
            worker.stages_s, worker.exporting = {}, bool(req.get("export_results"))
            worker.launches.compile_s = 0.0
            reply = handlers[op](req)
            if worker.launches.compile_s:  # within the other stages: kernels compiled or loaded from the cache
                worker.stages_s["compile"] = worker.launches.compile_s
            worker._sync()  # every request ends with this process's GPU work done (work queued at import too)
            stages = {"stages_s": worker.stages_s} if worker.stages_s else {}
            channel.write_message(fd_out, {"ok": True, **reply, **stages, "id": req.get("id")})
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            text = f"{type(exc).__name__}: {exc}"
            cuda_fault = any(marker in text for marker in _CUDA_FAULT_MARKERS)
            out_of_memory = isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or any(
                marker in text for marker in _OOM_MARKERS)
            channel.write_message(
                fd_out,
                {
                    "ok": False,
                    "id": req.get("id"),
                    "error": type(exc).__name__,
                    "message": str(exc)[:4000],
                    "traceback": traceback.format_exc()[-8000:],
                    "cuda_fault": cuda_fault,
                    "out_of_memory": out_of_memory,
                    "out_of_bounds": interp_bounds.take(),
                },
            )
            if cuda_fault or out_of_memory or isinstance(exc, (KeyboardInterrupt, SystemExit)):
                return  # a CUDA context after a fault is not to be trusted: let the parent replace us


PR_SET_PDEATHSIG = 1


def die_with_parent(evaluator: int) -> None:
    """Be killed when the parent process dies, even by SIGKILL: an orphaned worker would keep the GPU
    busy (a candidate's endless kernel runs on) and slow every later measurement on that GPU.

    The parent is the evaluator, or ncu in front of it when profiling. Set here, after the sandbox
    has changed the uid (a change of credentials clears the setting).
    """
    if sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if not channel.process_alive(evaluator):  # the evaluator died before the setting took effect
        os._exit(1)


def warm_op_guard() -> None:
    """Run one op under the op guard now: torch imports torch._dynamo on the first op dispatched under a
    TorchDispatchMode, 4-5 s on the H200 (its torch has no cached bytecode for it), which was the candidate's first
    checked call (bench/diag/first_call_profile.py, bench/results/2026-12-04-h200-owed-19 calls 4-5). Before the hello
    it is paid while the worker starts: beside the trusted worker's start, and off the path when prestarted."""
    with torch.no_grad(), integrity.OpGuard(poison=False):
        torch.empty(1).add_(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--role", choices=("candidate", "trusted"), required=True)
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--spool", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--parent", type=int, required=True, help="the evaluator's pid")
    args = parser.parse_args()
    die_with_parent(args.parent)
    if args.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(args.device))
    elif os.environ.get("TRITON_INTERPRET") == "1":
        interp_fp8.install()  # the interpreter's own fp8 casts misround; make them round like the GPU
        interp_bounds.install()  # and it reads or writes any address: stop accesses outside the launch's tensors
    if args.role == "candidate":
        warm_op_guard()
    serve(args.role, args.fd_in, args.fd_out, args.spool, args.device)


if __name__ == "__main__":
    main()
