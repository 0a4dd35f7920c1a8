"""The correctness phase: input sets and the oracle's outputs, the candidate's guarded calls, the comparisons.

The oracle's outputs are worked out on a thread of their own while the candidate's checked calls run; every
comparison and verdict is the parent's. A mixin of `evaluator.Evaluation`, whose state it reads.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from d2kbench.evaluate.compare import compare_output, output_error
from d2kbench.evaluate.result import EvalResult, Failure, InfraError, WorkloadResult, out_of_bounds_detail
from d2kbench.evaluate.transfer import shape_of
from d2kbench.evaluate.workers import WorkerProcess
from d2kbench.suite import Task, Workload

if TYPE_CHECKING:  # the evaluation that mixes this in, and imports this module
    from d2kbench.evaluate.evaluator import EvalOptions

ORACLE_THREAD = "d2k-oracle"  # the thread that works out a workload's expected outputs (`prepare_workload`)


@contextmanager
def one_cpu_thread():
    """torch's CPU ops of this thread on one core: a task's custom check runs in the parent beside busy workers
    (prestarted ones starting up), and a team of one thread per core is slowed badly by any busy core (moe's
    check, 3 ms alone: 15 ms beside one importing process with 2 threads on 2 cores, 5 ms with one thread either
    way; on the H200 its parent compare went from 0.1-0.4 to 6-8 s of an evaluation, bench/results/
    2026-12-04-h200-owed-19 call6). torch keeps the count per OS thread, so other threads keep theirs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CorrectnessPhase:
    """Checking the candidate on every correctness set of a workload (`Evaluation` mixes it in; it calls the
    evaluation's `trusted_request`, `make_inputs_request`, `check_fingerprints`, `slot_id`, `check_candidate_reply`,
    `phase` and the value transfer's `hand_over`, `unpack` and `export_flag`)."""

    # the evaluation's state it reads and sets (`Evaluation.__init__`)
    task: Task
    options: EvalOptions
    device: str
    trusted: WorkerProcess | None
    cand: WorkerProcess | None
    inputs: dict[str, dict[int, list[Any]]]
    expected: dict[str, dict[int, list[torch.Tensor]]]
    oracles: dict[str, dict[int, Future]]
    expected_strides: dict[str, list[list[int]]]
    derived: dict[str, dict[int, dict[str, float]]]
    slot_set: dict[str, dict[int, int]]
    resident: set[str]
    lends: dict[tuple[str, int], tuple[int, list[dict[str, Any] | None]]]
    result: EvalResult

    def prepare_workload(self, workload: Workload) -> None:
        """Make the input sets in the trusted worker and keep copies; the oracle's outputs for them are worked out
        on a thread of their own, beside the candidate's checked calls (`expected_outputs` waits for a set's,
        `settle_oracles` for all). Until they are settled the trusted worker is that thread's alone."""
        name = workload.name
        self.inputs[name], self.expected[name] = {}, {}
        sets = range(self.task.correctness_sets + 1)  # the last set rewrites slot 0 in place
        for i in sets:  # lent at once: the oracle's thread has the trusted worker while the checked calls run
            self.make_set(workload, i, oracle=False, lend=True)
        self.resident.add(name)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=ORACLE_THREAD)
        self.oracles[name] = {i: pool.submit(self.set_oracle, workload, i) for i in sets}
        pool.shutdown(wait=False)  # its thread works through the sets, then ends

    def expected_outputs(self, name: str, i: int) -> list[Any]:
        """The oracle's outputs for input set `i`, once its thread has them (its failure raised here)."""
        future = self.oracles.get(name, {}).get(i)
        if future is not None:
            future.result()
        return self.expected[name][i]

    def settle_oracles(self, name: str) -> None:
        """Wait until every oracle call of the workload has ended (the trusted worker free again); the first
        failure among them raised."""
        futures = list(self.oracles.pop(name, {}).values())
        wait_futures(futures)
        for future in futures:
            future.result()

    def make_set(self, workload: Workload, i: int, oracle: bool = True, lend: bool = False) -> None:
        """Input set `i` made in the trusted worker (its slot), the parent's copy or description kept (with `lend`,
        lent to the candidate's worker at once), and (with `oracle`) the oracle's outputs for it. A set made
        before must come out the same (`check_fingerprints`)."""
        name = workload.name
        reply = self.trusted_request(self.make_inputs_request(workload, i, lend=lend))
        self.check_fingerprints(name, i, reply)
        self.inputs.setdefault(name, {})[i] = self.unpack(reply["inputs"], self.trusted, inputs=True)
        if "lend" in reply:
            self.lends[(name, i)] = (int(reply["lend"]["id"]), reply["lend"]["inputs"])
        self.derived.setdefault(name, {})[i] = reply.get("derived", {})
        if oracle:
            self.set_oracle(workload, i)

    def set_oracle(self, workload: Workload, i: int) -> None:
        """The oracle's outputs for input set `i` (and the inputs it writes in place), kept as `expected`."""
        name, written = workload.name, self.task.written_inputs
        oracle = self.trusted_request(
            {"op": "call", "fn": "oracle", "slot": self.slot_id(name, i), "return_inputs": bool(written),
             **self.export_flag()}
        )
        outs = self.unpack(oracle["outputs"], self.trusted)
        self.expected_strides[name] = [d.get("strides") for d in oracle["outputs"]]
        if written:
            after = self.unpack(oracle["inputs"], self.trusted)
            outs += [after[k] for k in written]
        self.expected[name][i] = outs

    def check_tolerance_discriminates(self, workload: Workload) -> None:
        """Trivial outputs must fail the task's comparison: zeros, the oracle's mean as a constant, and
        the oracle's output for another input set (no input sensitivity). If one passes, a passing
        candidate proves nothing: the task's tolerance is at fault, an infra failure, never a pass."""
        name = workload.name
        sets = self.expected[name]
        for k, spec in enumerate(self.compared_specs()):
            expected = sets[0][k]
            if spec.compare not in ("allclose", "fp8") or expected.numel() < 2:
                continue
            dtype = getattr(torch, workload.dtype if spec.dtype == "workload" else spec.dtype)
            mean = float(expected.double().nan_to_num().mean())
            trivial = {
                "all zeros": torch.zeros(expected.shape, dtype=dtype),
                f"the constant {mean:.4g}": torch.full(expected.shape, mean).to(dtype),
                "the output of another input set": sets[1][k].to(dtype),
            }
            expected = expected.to(self.device)
            for label, value in trivial.items():
                if compare_output(spec, value.to(self.device), expected, workload.dtype) is None:
                    raise InfraError(f"task {self.task.id}, workload {name}: output {spec.name} passes the "
                                     f"comparison with {label}; its tolerance cannot tell a kernel from a trivial "
                                     "output")

    def check_workload(self, workload: Workload, wr: WorkloadResult) -> None:
        name, sets = workload.name, self.task.correctness_sets
        self.slot_set[name] = {}
        for i in range(sets):
            self.cand.request(
                {"op": "put_inputs", "slot": self.slot_id(name, i), "inputs": self.hand_over(name, i)},
                self.options.call_timeout_s,
            )
            self.slot_set[name][i] = i
            if not self.checked_call(workload, wr, slot=i, expected_set=i):
                return
        if self.options.reference_error:
            reply = self.trusted_request({"op": "call", "fn": "reference", "slot": self.slot_id(name, 0),
                                          "return_inputs": True, **self.export_flag()})
            wr.reference_error = self.errors(workload, 0, self.unpack(reply["outputs"], self.trusted),
                                             self.unpack(reply["inputs"], self.trusted))
        # Fresh inputs written over set 0 at the same addresses must give fresh outputs.
        if list(map(shape_of, self.inputs[name][0])) != list(map(shape_of, self.inputs[name][sets])):
            raise InfraError(f"task {self.task.id}: make_inputs gives input shapes that depend on the seed "
                             f"(workload {name}); shapes must depend on the workload only")
        self.cand.request(
            {"op": "put_inputs", "slot": self.slot_id(name, 0), "inputs": self.hand_over(name, sets), "in_place": True},
            self.options.call_timeout_s,
        )
        self.slot_set[name][0] = sets
        self.checked_call(workload, wr, slot=0, expected_set=sets, stale_check=True, trace=True)

    def checked_call(self, workload: Workload, wr: WorkloadResult, slot: int, expected_set: int,
                     stale_check: bool = False, trace: bool = False) -> bool:
        """One guarded, poisoned call (with `trace`, its kernels and aten ops listed); records failures on `wr`;
        True when everything held."""
        name = workload.name
        reply = self.cand.request(
            {"op": "call", "fn": "run", "slot": self.slot_id(name, slot), "guard": True, "poison": True,
             "return_inputs": True, "check_inputs": True, "trace": trace, **self.export_flag()},
            self.options.call_timeout_s,
        )
        self.check_candidate_reply(reply, {"outputs": list, "inputs": list, "findings": dict})
        outputs = self.unpack(reply["outputs"], self.cand)
        after = self.unpack(reply["inputs"], self.cand)
        findings = reply["findings"]
        if findings.get("trace_error"):  # the profiler's fault, not the candidate's: noted, no verdict
            self.result.environment["kernel_trace_error"] = str(findings["trace_error"])[:300]
        failures = self.integrity_failures(findings, workload)
        stray = findings.get("out_of_bounds") or []
        if not isinstance(stray, list):
            raise self.malformed_reply("findings")
        if stray:  # its error caught by the candidate's own code: still the access
            failures.append(Failure("crash", "out_of_bounds", out_of_bounds_detail(stray), name))
        failures += self.mutation_failures(workload, findings)
        mismatch = self.compare(workload, expected_set, outputs, after, [d.get("strides") for d in reply["outputs"]])
        if mismatch is not None:
            reason, detail = mismatch
            earlier = self.matches_earlier_set(workload, expected_set, outputs, after)
            if earlier is not None:
                failures.append(Failure("integrity", "stale_output",
                                        f"the outputs are those of an earlier input set ({earlier}), not of these "
                                        f"inputs: {detail}", name))
            elif stale_check and reason in ("mismatch", "nan"):
                failures.append(Failure("integrity", "stale_output",
                                        "inputs rewritten in place at the same addresses gave outputs that do not "
                                        f"match the new inputs: {detail}", name))
            else:
                failures.append(Failure("incorrect", reason, detail, name))
        elif expected_set == 0:
            wr.error = self.errors(workload, 0, outputs, after)
        for f in failures:
            self.result.add(f)
            wr.errors.append(f"{f.verdict}/{f.reason}: {f.detail}")
        return not failures

    def matches_earlier_set(self, workload: Workload, expected_set: int, outputs: list[Any],
                            after: list[Any]) -> int | None:
        """The earlier input set whose expected outputs these outputs match (a cached result), if any."""
        for i in range(expected_set if expected_set < self.task.correctness_sets else self.task.correctness_sets):
            if i != expected_set and self.compare(workload, i, outputs, after, []) is None:
                return i
        return None

    def integrity_failures(self, findings: dict[str, Any], workload: Workload) -> list[Failure]:
        name, out = workload.name, []
        if findings.get("launches", 0) < 1:
            out.append(Failure("integrity", "no_triton_launch", "the call launched no Triton kernel", name))
        ops = findings.get("forbidden_ops") or {}
        if ops:
            listed = ", ".join(f"aten.{op} x{n}" for op, n in sorted(ops.items()))
            out.append(Failure("integrity", "aten_op", f"torch did work inside the call: {listed}", name))
        if findings.get("aliasing"):
            out.append(Failure("integrity", "alias", "; ".join(findings["aliasing"]), name))
        kernels = findings.get("kernels") or {}
        if kernels.get("foreign"):
            out.append(Failure("integrity", "foreign_kernel",
                               f"the call ran kernels that are neither its Triton kernels nor torch's "
                               f"initialisation or copy kernels: {', '.join(kernels['foreign'][:5])}", name))
        if kernels.get("ops") and not ops:
            out.append(Failure("integrity", "aten_op", "torch did work inside the call with the op guard switched "
                               f"off: {', '.join('aten.' + op for op in kernels['ops'][:8])}", name))
        if kernels.get("streams"):
            out.append(Failure("integrity", "side_stream",
                               f"the call's kernels ran on {len(kernels['streams'])} streams", name))
        if findings.get("late_writes"):
            out.append(Failure("integrity", "side_stream",
                               f"{', '.join(findings['late_writes'])} changed after the call's stream was "
                               "synchronized: work left running on another stream or in a thread", name))
        if findings.get("not_tensor"):
            out.append(Failure("integrity", "not_plain_tensor",
                               f"outputs {findings['not_tensor']} are not plain torch.Tensor objects", name))
        return out

    def mutation_failures(self, workload: Workload, findings: dict[str, Any]) -> list[Failure]:
        """Inputs not declared as written must stay bit for bit unchanged (checked in the worker, on the device)."""
        if "mutated" not in findings:
            return [Failure("integrity", "forged_result", "the worker's reply lacks the unchanged-input check",
                            workload.name)]
        changed = [self.task.inputs[int(i)].name for i in findings["mutated"]
                   if int(i) not in self.task.written_inputs]
        if changed:
            return [Failure("integrity", "input_mutated", f"the call modified its inputs {changed}", workload.name)]
        return []

    def compared_specs(self) -> list:
        """The specs of the compared values: returned outputs, then the inputs written in place."""
        by_name = {o.name: o for o in self.task.outputs}
        return list(self.task.returned_outputs) + [by_name[self.task.inputs[i].name] for i in self.task.written_inputs]

    def compared_values(self, outputs: list[Any], after: list[Any]) -> list[Any]:
        """What is compared with the oracle, in `compared_specs` order: the outputs, then the written inputs."""
        return list(outputs) + [after[k] for k in self.task.written_inputs]

    def compare(self, workload: Workload, expected_set: int, outputs: list[Any], after: list[Any],
                strides: list[Any]) -> tuple[str, str] | None:
        """Compare with the oracle: (reason, detail) of the first difference, or None."""
        with self.phase("parent.compare", into="requests_s"):
            return self._compare(workload, expected_set, outputs, after, strides)

    def _compare(self, workload: Workload, expected_set: int, outputs: list[Any], after: list[Any],
                 strides: list[Any]) -> tuple[str, str] | None:
        n_returned = len(self.task.returned_outputs)
        if len(outputs) != n_returned or any(not isinstance(o, torch.Tensor) for o in outputs):
            return "output_count", (f"returned {len(outputs)} value(s) of types {[type(o).__name__ for o in outputs]}; "
                                    f"the task returns {n_returned} tensor(s)")
        expected = self.expected_outputs(workload.name, expected_set)
        got = self.compared_values(outputs, after)
        specs = self.compared_specs()
        if any(spec.compare == "custom" for spec in specs):
            message = self.custom_check(workload, expected_set, got, expected)
            if message:
                return "check_failed", message
        want_strides = self.expected_strides[workload.name]
        for k, spec in enumerate(specs):
            if spec.compare == "custom":
                continue
            # On a GPU machine the parent compares on the GPU: a CPU pass over a gigabyte output takes seconds.
            mismatch = compare_output(
                spec, got[k].to(self.device), expected[k].to(self.device), workload.dtype,
                got_strides=strides[k] if k < len(strides) else None,
                expected_strides=want_strides[k] if k < len(want_strides) else None,
            )
            if mismatch:
                return mismatch.reason, mismatch.detail
        return None

    def errors(self, workload: Workload, expected_set: int, outputs: list[Any], after: list[Any]) -> dict[str, float]:
        """Each compared output's distance from the oracle (`compare.output_error`), where it has one."""
        got = self.compared_values(outputs, after)
        out = {}
        for spec, g, e in zip(self.compared_specs(), got, self.expected_outputs(workload.name, expected_set),
                              strict=False):
            if isinstance(g, torch.Tensor):
                value = output_error(spec, g.to(self.device), e.to(self.device))
                if value is not None:
                    out[spec.name] = value
        return out

    def custom_check(self, workload: Workload, expected_set: int, got: list[Any], expected: list[Any]) -> str | None:
        from d2kbench.evaluate.taskcode import reference_module

        check = getattr(reference_module(self.task), "check", None)
        if check is None:
            raise InfraError(f"task {self.task.id} has a custom comparison but reference.py defines no check()")
        with one_cpu_thread():
            return check(tuple(got), tuple(expected), tuple(self.inputs[workload.name][expected_set]))
