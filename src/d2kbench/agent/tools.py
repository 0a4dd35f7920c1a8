"""The agent's tools: JSON schemas, argument checking, and what each tool does in the workspace.

Every failure (bad JSON, wrong arguments, unknown tool, a path outside the workspace, an evaluator
exception) becomes the tool's text result: the run never dies of a tool call.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d2kbench.agent.evalservice import EvalService
from d2kbench.agent.models.base import ToolCall
from d2kbench.evaluate.evaluator import EvalOptions
from d2kbench.evaluate.ncu import KernelSummary, NcuProfile
from d2kbench.evaluate.result import EvalResult
from d2kbench.evaluate.sm90 import H200_SMS
from d2kbench.suite import Task

SOLUTION = "solution.py"


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
            "required": list(params),
            "additionalProperties": False,
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool("write_file", "Write a text file in your workspace (created or replaced). Your kernel is solution.py.",
          path="path relative to the workspace, e.g. solution.py", content="the whole file content"),
    _tool("read_file", "Read a text file of your workspace.", path="path relative to the workspace"),
    _tool("list_files", "List the files of your workspace with their sizes."),
    _tool("run_tests", "Check solution.py for correctness on the visible workloads (no timing): the evaluator's "
          "verdict, the reason and the errors of each workload."),
    _tool("benchmark", "Check and time solution.py on the visible workloads: per workload your time, the PyTorch "
          "reference's time and the speedup."),
    _tool("profile", "Compile every Triton kernel that solution.py launches for sm_90 and report registers, "
          "spills, shared memory, num_warps, num_stages and whether it uses wgmma, TMA and warp specialization; "
          "on a GPU, also Nsight Compute counters of one call (duration, DRAM and SM throughput, occupancy, top "
          "stall reason per kernel)."),
    _tool("submit", "Submit solution.py as it stands now as your answer. This ends your work on the task."),
]
TOOL_NAMES = tuple(t["name"] for t in TOOLS)


class ToolArgumentError(ValueError):
    """Arguments that do not fit a tool's schema."""


def parse_arguments(call: ToolCall) -> dict[str, str]:
    """The call's arguments checked against its tool's schema."""
    schema = next(t["parameters"] for t in TOOLS if t["name"] == call.name)
    raw = call.arguments.strip()
    try:
        args = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ToolArgumentError(f"the arguments are not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(args, dict):
        raise ToolArgumentError(f"the arguments must be a JSON object, got {type(args).__name__}")
    expected = schema["properties"]
    missing = [p for p in schema["required"] if p not in args]
    extra = sorted(set(args) - set(expected))
    wrong = [p for p in expected if p in args and not isinstance(args[p], str)]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected {', '.join(extra)}")
    if wrong:
        problems.append(f"{', '.join(wrong)} must be a string")
    if problems:
        wanted = ", ".join(f"{p}: string" for p in expected) or "no arguments"
        raise ToolArgumentError(f"{'; '.join(problems)} (expected {wanted})")
    return args


class WorkspaceError(ValueError):
    """A path that would leave the workspace, or a file that cannot be used."""


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """`path` inside the workspace; absolute paths, `..` and symlinks that lead outside are refused."""
    if not path.strip():
        raise WorkspaceError("the path is empty")
    relative = Path(path)
    if relative.is_absolute():
        raise WorkspaceError(f"{path!r} is absolute; use a path relative to the workspace")
    if ".." in relative.parts:
        raise WorkspaceError(f"{path!r} contains '..'; files outside the workspace are not accessible")
    root = workspace.resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(root):
        raise WorkspaceError(f"{path!r} resolves outside the workspace (a symlink); refused")
    return target


def cut(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, keeping its head and its tail around a visible marker."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


@dataclass
class ToolOutcome:
    output: str
    submitted: bool = False


class Toolbox:
    """The tools of one run, acting on its workspace and reaching the evaluator through `evals`."""

    def __init__(self, task: Task, workspace: Path, evals: EvalService, gpu: bool, output_chars: int):
        self.task, self.workspace, self.evals, self.gpu = task, workspace, evals, gpu
        self.output_chars = output_chars

    @property
    def solution(self) -> Path:
        return self.workspace / SOLUTION

    async def call(self, call: ToolCall) -> ToolOutcome:
        """Run one tool call; every failure becomes the tool's text result."""
        if call.name not in TOOL_NAMES:
            return ToolOutcome(f"error: there is no tool {call.name!r}; the tools are {', '.join(TOOL_NAMES)}")
        try:
            args = parse_arguments(call)
            outcome = await getattr(self, f"tool_{call.name}")(**args)
        except (ToolArgumentError, WorkspaceError) as exc:
            outcome = ToolOutcome(f"error: {call.name}: {exc}")
        except Exception as exc:  # an evaluator or file-system failure goes back to the model
            outcome = ToolOutcome(f"error: {call.name} failed: {type(exc).__name__}: {exc}")
        outcome.output = cut(outcome.output, self.output_chars)
        return outcome

    # -- files -------------------------------------------------------------------------------------
    async def tool_write_file(self, path: str, content: str) -> ToolOutcome:
        target = resolve_in_workspace(self.workspace, path)
        if target.is_dir():
            raise WorkspaceError(f"{path!r} is a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return ToolOutcome(f"wrote {len(content.encode())} bytes to {target.relative_to(self.workspace.resolve())}")

    async def tool_read_file(self, path: str) -> ToolOutcome:
        target = resolve_in_workspace(self.workspace, path)
        if not target.is_file():
            raise WorkspaceError(f"there is no file {path!r} in the workspace")
        return ToolOutcome(target.read_text(encoding="utf-8", errors="replace"))

    async def tool_list_files(self) -> ToolOutcome:
        root = self.workspace.resolve()
        lines = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = Path(folder) / name
                size = path.lstat().st_size
                lines.append(f"{path.relative_to(root)} ({size} bytes)")
        return ToolOutcome("\n".join(lines) if lines else "the workspace is empty")

    # -- the evaluator -----------------------------------------------------------------------------
    def _need_solution(self) -> None:
        if not self.solution.is_file():
            raise WorkspaceError(f"there is no {SOLUTION} in the workspace yet; write it with write_file first")

    async def tool_run_tests(self) -> ToolOutcome:
        self._need_solution()
        result = await self.evals.evaluate(self.task, self.solution, EvalOptions(time=False, expert=False))
        return ToolOutcome(format_verdict(result) + "\n" + format_workloads(result, timings=False))

    async def tool_benchmark(self) -> ToolOutcome:
        self._need_solution()
        result = await self.evals.evaluate(self.task, self.solution, EvalOptions(time=self.gpu, expert=False))
        text = format_verdict(result) + "\n" + format_workloads(result, timings=True)
        if not self.gpu:
            text += ("\nInterpreter mode (no GPU): Triton's interpreter runs the kernels on the CPU, so there are "
                     "no timings; only correctness is reported.")
        elif result.verdict != "pass":
            text += "\nNothing was timed: timing runs only when every workload passes."
        return ToolOutcome(text)

    async def tool_profile(self) -> ToolOutcome:
        self._need_solution()
        kernels = await self.evals.compile_report(self.task, self.solution)
        ncu_profile = getattr(self.evals, "ncu_profile", None)
        if ncu_profile is None:
            ncu = "no ncu summary: this evaluation service does not collect hardware counters"
        else:
            ncu = format_ncu(await ncu_profile(self.task, self.solution))
        return ToolOutcome(format_compile_report(kernels, self.task.profile_workload or "the first cpu workload")
                           + "\n" + ncu)

    async def tool_submit(self) -> ToolOutcome:
        self._need_solution()
        return ToolOutcome(f"submitted {SOLUTION}; the run ends here.", submitted=True)


def format_verdict(result: EvalResult) -> str:
    lines = [f"verdict: {result.verdict}"]
    if result.reason:
        lines.append(f"reason: {result.reason}")
    if result.detail:
        lines.append(f"detail: {result.detail}")
    if result.verdict != "pass" and result.log_tail.strip():
        lines.append(f"output of your code (tail):\n{result.log_tail.strip()}")
    return "\n".join(lines)


def format_workloads(result: EvalResult, timings: bool) -> str:
    mode = "GPU" if result.mode == "gpu" else "interpreter, CPU"
    lines = [f"workloads ({mode}):"]
    for w in result.workloads:
        state = {True: "correct", False: "FAILED", None: "not run"}[w.correct]
        line = f"  {w.name} [{w.split}]: {state}"
        cand, ref = w.timings.get("candidate"), w.timings.get("reference")
        if timings and cand and ref:
            line += f"; yours {cand.median_ms:.4f} ms, PyTorch reference {ref.median_ms:.4f} ms"
            if w.speedup is not None:
                line += f", speedup {w.speedup:.2f}x"
            if cand.graph_median_ms is not None and ref.graph_median_ms is not None:
                line += (f" (CUDA graph replay, the scored time: yours {cand.graph_median_ms:.4f} ms, "
                         f"reference {ref.graph_median_ms:.4f} ms)")
            if w.sol_fraction is not None:
                line += f"; {w.sol_fraction:.1%} of speed of light"
        lines.append(line)
        lines += [f"    {e}" for e in w.errors]
    return "\n".join(lines)


def format_compile_report(kernels: list[dict[str, Any]], workload: str) -> str:
    """One line per distinct compiled kernel (launches with the same configuration counted, not repeated)."""
    if not kernels:
        return f"no Triton kernel was compiled (did solution.py launch one on workload {workload}?)"
    lines: dict[str, int] = {}
    for k in kernels:
        consts = ", ".join(f"{n}={v}" for n, v in (k.get("constexprs") or {}).items())
        head = f"- {k.get('kernel')}({consts}) num_warps={k.get('num_warps')} num_stages={k.get('num_stages')}"
        if not k.get("ok", True):
            line = f"{head}: compile failed: {k.get('error', 'unknown error')}"
        else:
            line = (f"{head}: registers={k.get('registers')}, spills store/load={k.get('spill_store_bytes')}/"
                    f"{k.get('spill_load_bytes')} bytes, shared memory={k.get('shared_bytes')} bytes, "
                    f"stack frame={k.get('stack_frame_bytes')} bytes, wgmma={'yes' if k.get('wgmma') else 'no'}")
            if k.get("wgmma_serialized"):
                line += f" but SERIALIZED by ptxas (each waits for the one before: {k['wgmma_serialized']})"
            line += ", TMA" * bool(k.get("tma")) + ", cp.async" * bool(k.get("cp_async"))
            if k.get("wgmma") and not (k.get("tma") or k.get("cp_async")):
                line += " (no cp.async or TMA: the operands pass through registers)"
            line += ", warp-specialized" * bool(k.get("warp_specialized"))
            line += ", programmatic dependent launch" * bool(k.get("dependent_launch"))
            if k.get("programs_per_sm") is not None:
                line += f", programs per SM={k['programs_per_sm']} (limited by {k['programs_limited_by']})"
            if k.get("grid") is not None:
                line += f"; grid={tuple(k['grid'])}: {k['programs']} programs"
                if k.get("waves") is not None:
                    line += f", {k['waves']:.2f} waves on {H200_SMS} SMs"
        lines[line] = lines.get(line, 0) + 1
    head = f"sm_90 compile report (the kernels solution.py launches on workload {workload}, its shapes and dtype):"
    return "\n".join([head, *(f"{line} [{n} launches]" if n > 1 else line for line, n in lines.items())])


def format_ncu(profile: NcuProfile, max_kernels: int = 16) -> str:
    if profile.error:
        return f"no ncu summary: {profile.error}"
    kernels = profile.kernels
    total = sum(k.duration_us or 0.0 for k in kernels)
    lines = [f"ncu, one call of run on workload {profile.workload} ({len(kernels)} kernel launches, {total:.2f} us "
             "of kernel time; throughput and occupancy in % of the GPU's sustained peak):"]
    lines += [f"- {format_kernel(k)}" for k in kernels[:max_kernels]]
    if len(kernels) > max_kernels:
        rest = sum(k.duration_us or 0.0 for k in kernels[max_kernels:])
        lines.append(f"- ... {len(kernels) - max_kernels} more launches, {rest:.2f} us")
    return "\n".join(lines)


def format_kernel(k: KernelSummary) -> str:
    def num(value: float | int | None, spec: str = ".1f", unit: str = "%") -> str:
        return "n/a" if value is None else f"{value:{spec}}{unit}"

    name = k.name if len(k.name) <= 60 else k.name[:57] + "..."
    dram = num(None if k.dram_bytes is None else k.dram_bytes / 1e6, ".3f", " MB")
    text = (f"{name} grid={k.grid} block={k.block}: {num(k.duration_us, '.2f', ' us')}, DRAM {num(k.dram_pct)} "
            f"({dram}), memory {num(k.memory_pct)}, SM {num(k.sm_pct)}, occupancy {num(k.occupancy_pct)}, "
            f"registers/thread {num(k.registers, 'd', '')}, shared/block {num(k.shared_bytes, 'd', ' B')}")
    if k.top_stall:
        text += f", top stall {k.top_stall[0]} ({k.top_stall[1]:.1f} cycles/instr)"
    return text
