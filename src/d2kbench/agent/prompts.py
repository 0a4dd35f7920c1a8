"""The prompts: the system prompt, the task message with its guidance block, and the reminder.

A run's requests depend on the config only through `guidance_block`: the task message is
`task_text + guidance_block + CLOSING`, and `guidance_block("none")` is empty, so a guided and an
unguided request of the same task are identical byte for byte outside that block.
"""

from __future__ import annotations

from d2kbench.agent.tools import TOOLS
from d2kbench.suite import Task

GPU_HARDWARE = (
    "an NVIDIA H200 GPU (Hopper, sm_90: 132 SMs, 141 GB HBM3e at about 4.8 TB/s, 228 KB of shared memory per "
    "SM, wgmma and TMA available). Your kernels are timed on it."
)
CPU_HARDWARE = (
    "interpreter mode, no GPU: Triton's interpreter (TRITON_INTERPRET=1) runs your kernels on the CPU, on small "
    "workloads in float16/float32. There are no timings; only correctness counts. The interpreter does not "
    "support bfloat16. A load or store outside the tensors a launch was given fails the check "
    "(crash/out_of_bounds), as it could fault on a GPU. `profile` still compiles your kernels for sm_90 (H200) and "
    "reports their resources."
)

SYSTEM_TEMPLATE = """\
You are a GPU kernel engineer. You write a Triton kernel for one task and make it correct and fast.

# Environment
You work in a workspace folder of your own, through tools only. Your answer is the file solution.py
in the workspace. Hardware: {hardware}
Each of your replies is one turn, whatever the number of tool calls it makes (they run in order); a reply
without a tool call still costs a turn. You have at most {turns} turns. The run ends when you call
`submit` (your answer is solution.py as it stands then) or when the turns run out (your answer is then
the last solution.py you wrote).

# The candidate interface
solution.py defines `run(*inputs)`: it takes the values that the task's `make_inputs` returns, in that
order, and returns what the PyTorch `reference(*inputs)` returns (a tensor, or a tuple of tensors),
computed by Triton kernels that the file launches.

# How solution.py is judged
- Correctness on every workload: several fresh random input sets plus edge cases, every element compared
  with a high-precision oracle within the task's tolerances; unwritten output elements fail.
- Integrity: at least one Triton kernel launches per call; inside `run` torch may only allocate, initialise,
  view and copy tensors (empty, zeros, full, fill, views, copies): any other torch op (arithmetic,
  reductions, matmul, sort, cumsum, softmax, ...) fails the task, and so do vendor libraries (cuBLAS,
  cuDNN, flash). Outputs must not alias inputs; inputs must stay unchanged unless the task says one is
  written in place; new inputs must give new outputs (no caching); all work must be done when the current
  stream is synchronized.
- Speed: the time of `run` against the PyTorch reference on the task's workloads, and on hidden workloads
  of other shapes that are checked for correctness. Latency-bound workloads are timed by replaying a CUDA
  graph captured from one call, as serving engines run them: the captured work must read its inputs on the GPU
  when replayed (the graph is replayed again after its inputs change in place, and its outputs are checked).

# Tools
{tools}
"""

CLOSING = (
    "\n\nWrite solution.py, check it with run_tests, measure it with benchmark and profile, improve it, and "
    "call submit when it is your answer."
)

GUIDANCE_INTRO = (
    "\n\n# Design guidance\n\nThe notes below describe the design of an expert kernel for this task, layer by "
    "layer (L1: the algorithm, L2: the dataflow, L3: the execution tricks). They are design advice, not code.\n\n"
)


def hardware_text(gpu: bool) -> str:
    return GPU_HARDWARE if gpu else CPU_HARDWARE


def system_prompt(gpu: bool, turns: int) -> str:
    tools = "\n".join(f"- {t['name']}({', '.join(t['parameters']['properties'])}): {t['description']}" for t in TOOLS)
    return SYSTEM_TEMPLATE.format(hardware=hardware_text(gpu), turns=turns, tools=tools)


def visible_split(gpu: bool) -> str:
    """The workloads the agent sees: the scored ones on a GPU, the small `cpu` ones in the interpreter."""
    return "scored" if gpu else "cpu"


def task_text(task: Task, gpu: bool) -> str:
    """The task without guidance: description, entry point, inputs, outputs, workloads, reference code."""
    workloads = task.split(visible_split(gpu))
    dtypes = sorted({w.dtype for w in workloads})
    lines = [f"# Task: {task.title} (`{task.id}`)", "", task.description.strip(), "",
             f"Entry point, in solution.py: `{task.signature}`", "", "## Inputs, in the order make_inputs returns them"]
    for spec in task.inputs:
        dtype = "the workload's dtype" if spec.dtype == "workload" else (spec.dtype or spec.kind)
        kind = f"{spec.kind}, dtype {dtype}, shape {spec.shape}" if spec.kind == "tensor" else spec.kind
        written = " Written in place: the kernel must update it." if spec.written else ""
        doc = f": {spec.doc}" if spec.doc else ""
        lines.append(f"- `{spec.name}` ({kind}){doc}.{written}")
    lines += ["", "## Outputs and tolerances"]
    for out in task.outputs:
        dtype = "the workload's dtype" if out.dtype == "workload" else out.dtype
        lines.append(f"- `{out.name}`: dtype {dtype}, shape {out.shape}; {tolerance_text(out, dtypes)}")
    lines += ["", f"## Workloads you can run ({len(workloads)}; the final check adds hidden ones of other shapes)"]
    for w in workloads:
        params = ", ".join(f"{k}={v}" for k, v in w.params.items())
        note = f" ({w.note})" if w.note else ""
        lines.append(f"- {w.name}: {w.dtype}, {params}{note}")
    if task.reference_note.strip():
        lines += ["", "## About the reference", "", task.reference_note.strip()]
    reference = task.reference_path.read_text(encoding="utf-8").strip()
    lines += ["", "## The PyTorch reference (reference.py; `reference` is the baseline you are timed against)",
              "", "```python", reference, "```"]
    return "\n".join(lines)


def tolerance_text(out, dtypes: list[str]) -> str:
    if out.compare == "exact":
        return "compared exactly"
    if out.compare == "custom":
        return "compared by the task's own check (see check() in reference.py)"
    if out.compare == "fp8":
        return (f"fp8 codes compared: each within {out.max_code_step} code step(s) of the oracle's, and at most "
                f"{out.max_step_frac:.3%} of the codes different at all")
    scale = " * rms(oracle)" if out.scale_by_rms else ""
    bounds = "; ".join(f"{d}: |got - oracle| <= {out.tolerances(d)[0]:g}{scale} + {out.tolerances(d)[1]:g} * |oracle|"
                       for d in dtypes)
    return f"compared elementwise ({bounds})"


def guidance_block(task: Task, config: str) -> str:
    """The guidance of `config` under its `## L1` / `## L2` / `## L3` headings; empty for `none`."""
    guidance = task.guidance_for(config)
    return GUIDANCE_INTRO + guidance.strip() if guidance else ""


def task_message(task: Task, config: str, gpu: bool) -> str:
    return task_text(task, gpu) + guidance_block(task, config) + CLOSING


def reminder(turns_left: int) -> str:
    names = ", ".join(t["name"] for t in TOOLS)
    return (f"Your reply called no tool, and it counted as a turn ({turns_left} left). Act through the tools "
            f"({names}); call submit when solution.py is your answer.")
