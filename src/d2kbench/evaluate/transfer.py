"""How values travel between the parent and the workers: files in a spool folder, or blocks on the GPU.

Input sets on the GPU route stay in the trusted worker (the parent holds `Held` descriptions); the trusted
worker lends a set to the candidate's worker just before a request of the candidate's needs it (`hand_over`,
`ipc.InputLending`), and the parent takes lends back once the requests that imported them are over
(`return_lends`): the blocks a task's evaluation keeps are those of the sets in use, not of every set it ever
made. Results come back as files or, where this evaluation's probes passed (`check_device_inputs`,
`check_device_outputs`), as GPU blocks cloned in the parent. A mixin of `evaluator.Evaluation`, whose state it
reads.
"""

from __future__ import annotations

import secrets
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from d2kbench.evaluate import channel, ipc
from d2kbench.evaluate.result import EvalResult, InfraError
from d2kbench.evaluate.workers import RequestFailed, WorkerFault, WorkerProcess
from d2kbench.suite import Workload

if TYPE_CHECKING:  # the evaluation that mixes this in, and imports this module
    from d2kbench.evaluate.evaluator import EvalOptions


@dataclass(frozen=True)
class Held:
    """An input tensor that stays in the trusted worker, on the GPU: the parent holds its description only; the
    candidate's worker gets a lent copy (`ValueTransfer.hand_over`) and clones it."""

    desc: dict[str, Any]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.desc["shape"])


def workload_dict(w: Workload) -> dict[str, Any]:
    """A workload as a worker's request carries it."""
    return {"name": w.name, "split": w.split, "dtype": w.dtype, "params": dict(w.params), "note": w.note}


def shape_of(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, (torch.Tensor, Held)) else None


class ValueTransfer:
    """The parent side of moving inputs and results between workers (`Evaluation` mixes it in; it calls the
    evaluation's `trusted_request`, `spawn`, `phase`, `slot_id` and `malformed_reply`)."""

    # the evaluation's state it reads and sets (`Evaluation.__init__`)
    options: EvalOptions
    device: str
    trusted: WorkerProcess | None
    cand: WorkerProcess | None
    export_inputs: bool
    export_outputs: bool
    input_files: dict[int, tuple[torch.Tensor, Path]]
    inputs: dict[str, dict[int, list[Any]]]
    lends: dict[tuple[str, int], tuple[int, list[dict[str, Any] | None]]]
    returned_lends: list[int]
    result: EvalResult

    def check_device_inputs(self, cand: WorkerProcess) -> WorkerProcess:
        """Send a probe block device to device before the candidate's code loads; if the route fails there, the
        evaluation falls back to files (an import failing later could not be told from the candidate's doing).
        The candidate's worker to load the candidate into: `cand`, or a fresh one if the probe killed it."""
        seed = secrets.randbits(16)
        try:
            probe = self.trusted_request({"op": "ipc_probe", "seed": seed})
            got = cand.request({"op": "ipc_check", "input": probe["input"]}, self.options.load_timeout_s)["sum"]
            sent = probe["sum"]
            problem = None if got == sent else f"the probe block arrived changed (sum {got}, {sent} sent)"
        except InfraError as exc:
            problem = str(exc)
        except (RequestFailed, WorkerFault) as exc:
            problem = f"the candidate's worker could not import the probe block: {exc}"
            cand = self.alive_or_fresh(cand)
        self.export_inputs = problem is None
        self.result.environment["device_inputs"] = "on" if problem is None else f"off (files instead): {problem}"
        return cand

    def check_device_outputs(self, cand: WorkerProcess) -> WorkerProcess:
        """Import a probe block from each worker (the candidate's before its code loads) and check its sum; where
        either fails, results travel through files and `environment.device_outputs` says why. The candidate's
        worker to load the candidate into: `cand`, or a fresh one if the probe killed it."""
        problem = None
        for role in ("trusted", "candidate"):
            message = {"op": "ipc_probe", "seed": secrets.randbits(16)}
            try:
                probe = (self.trusted_request(message) if role == "trusted"
                         else cand.request(message, self.options.load_timeout_s))
                got = int(ipc.import_clone(probe["input"], torch.device(self.device), check_size=True).sum())
            except (InfraError, RequestFailed, WorkerFault, RuntimeError, ValueError) as exc:
                problem = f"the parent could not import the {role} worker's probe block: {exc}"[:300]
            else:
                if got != probe["sum"]:
                    problem = f"the {role} worker's probe block arrived changed (sum {got}, {probe['sum']} sent)"
            if problem:
                break
        cand = self.alive_or_fresh(cand)
        self.export_outputs = problem is None
        self.result.environment["device_outputs"] = "on" if problem is None else f"off (files instead): {problem}"
        return cand

    def alive_or_fresh(self, cand: WorkerProcess) -> WorkerProcess:
        """`cand` (the candidate's worker, nothing loaded yet) if a probe left it alive, else a fresh one."""
        if cand.alive:
            return cand
        cand.kill()
        return self.spawn("candidate")

    def export_flag(self) -> dict[str, bool]:
        """What a request whose reply carries results adds to ask for them device to device (`device_outputs`)."""
        return {"export_results": True} if self.export_outputs else {}

    def pack(self, values: list[Any], worker: WorkerProcess) -> list[dict[str, Any]]:
        """Values for `worker`, in its own spool folder: the trusted worker's input files hard-linked (read-only)
        where the worker is a candidate confined to a uid of its own, which cannot write them; else copied.
        `Held` tensors cannot travel this way (`hand_over`)."""
        if any(isinstance(v, Held) for v in values):
            raise TypeError("a held input travels by hand_over, not pack")
        link = worker is self.cand and worker.sandbox is not None and worker.sandbox.status.get("uid") is not None
        with self.phase("parent.pack", into="requests_s"):
            return [(link and self.linked(v, worker)) or channel.pack_value(v, worker.spool) for v in values]

    def hand_over(self, name: str, i: int) -> list[dict[str, Any]]:
        """Input set `i` of workload `name` as the candidate's worker's next request takes it: held tensors by
        the set's current lend (lent now, where it has none), the other values packed."""
        values = self.inputs[name][i]
        if not any(isinstance(v, Held) for v in values):
            return self.pack(values, self.cand)
        if (name, i) not in self.lends:
            self.lend_sets(name, [i])
        lent = self.lends[(name, i)][1]
        return [lent[k] if isinstance(v, Held) else self.pack([v], self.cand)[0] for k, v in enumerate(values)]

    def lend_sets(self, name: str, sets: list[int]) -> None:
        """Have the trusted worker lend input sets `sets` of workload `name` (their held tensors copied into its
        lending blocks), taking back the lends returned since its last request that could."""
        sets = [i for i in sets if (name, i) not in self.lends and any(isinstance(v, Held) for v in
                                                                       self.inputs[name][i])]
        if not sets:
            return
        reply = self.trusted_request({"op": "lend", "slots": [self.slot_id(name, i) for i in sets],
                                      "release": self.take_returned_lends()})
        for i, lend in zip(sets, reply["lends"], strict=True):
            self.lends[(name, i)] = (int(lend["id"]), lend["inputs"])

    def return_lends(self, name: str) -> None:
        """Every lend of workload `name`'s sets is over (the requests that imported them have ended): the trusted
        worker takes them back with its next request that lends or drops (`take_returned_lends`)."""
        for key in [k for k in self.lends if k[0] == name]:
            self.returned_lends.append(self.lends.pop(key)[0])

    def take_returned_lends(self) -> list[int]:
        """The lend ids to send back with a request to the trusted worker (then forgotten here)."""
        ids, self.returned_lends = self.returned_lends, []
        return ids

    def forget_lends(self) -> None:
        """The trusted worker was replaced: its lends and blocks died with it."""
        self.lends.clear()
        self.returned_lends.clear()

    def linked(self, value: Any, worker: WorkerProcess) -> dict[str, Any] | None:
        """`value` as a link to the trusted worker's file in `worker`'s spool, if it is one of its inputs."""
        entry = self.input_files.get(id(value))
        if entry is None or entry[0] is not value:
            return None
        return channel.link_value(value, entry[1], worker.spool)

    def unpack(self, descs: list[dict[str, Any]], worker: WorkerProcess, inputs: bool = False) -> list[Any]:
        """Values from `worker`'s spool folder (the trusted worker's mapped, the candidate's copied). The
        trusted worker's `inputs` keep their files, for `pack` to link (removed with the spool)."""
        mapped = worker is self.trusted
        # The candidate's worker stopped while its exported blocks are cloned: none of its threads can free one
        # under the parent's mapping (a read of freed memory would fault the evaluator's own CUDA context).
        blocks = worker is self.cand and any(ipc.is_exported(d) for d in descs)
        with self.phase("parent.unpack", into="requests_s"), worker.paused() if blocks else nullcontext():
            try:
                values = [self.unpack_exported(d, worker) if ipc.is_exported(d) or d.get("held") else
                          channel.unpack_value(d, worker.spool, mapped=mapped, consume=not (mapped and inputs))
                          for d in descs]
            except Exception as exc:  # noqa: BLE001 - whatever a forged description makes reading raise
                if worker is not self.cand:
                    raise
                raise self.malformed_reply(f"results ({type(exc).__name__}: {exc})"[:500]) from None
        if mapped and inputs:
            for d, v in zip(descs, values, strict=True):
                if isinstance(v, torch.Tensor) and v.numel():
                    self.input_files[id(v)] = (v, worker.spool / d["tensor"])
        return values

    def unpack_exported(self, desc: dict[str, Any], worker: WorkerProcess) -> Any:
        """A value a worker keeps or exported on the GPU. The trusted worker's inputs stay descriptions (`Held`,
        lent to the candidate's worker when it needs them); results (`"result"`) are cloned here at once, and only
        where this evaluation asked for them that way: the parent opens no handle of the candidate's worker
        otherwise."""
        if desc.get("held"):
            if worker is self.trusted:
                return Held(desc)
            raise channel.ProtocolError("the candidate's worker sent a held input")
        if not desc.get("result"):
            raise channel.ProtocolError(f"the {worker.role} worker sent an input's device handle")
        if not self.export_outputs:
            raise channel.ProtocolError(f"the {worker.role} worker sent a device handle that was not asked for")
        return ipc.import_clone(desc, torch.device(self.device), check_size=worker is not self.trusted)

    def put_report_inputs(self, workload: Workload, worker: WorkerProcess, timeout: float) -> None:
        """Make `workload`'s inputs (seed 0) in the trusted worker and put them into `worker`'s slot 0: the
        inputs of a report (compile, ncu), never of a verdict."""
        reply = self.trusted_request({"op": "make_inputs", "workload": workload_dict(workload), "slot": 0, "seed": 0})
        inputs = self.pack(self.unpack(reply["inputs"], self.trusted), worker)
        worker.request({"op": "put_inputs", "slot": 0, "inputs": inputs}, timeout)
