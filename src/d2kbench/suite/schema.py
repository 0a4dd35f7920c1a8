"""The task suite as plain data: `Task`, `Workload` and their parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

FAMILIES = ("attention", "moe", "quantization", "optimizer")
BOUNDS = ("memory", "compute", "latency", "mixed")
SPLITS = ("scored", "hidden", "cpu")
LAYERS = ("L1", "L2", "L3")
COMPARE_KINDS = ("allclose", "exact", "fp8", "custom")
INPUT_KINDS = ("tensor", "int", "float", "bool")
CPU_DTYPES = ("float16", "float32")
DTYPES = (
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
)


class TaskFormatError(ValueError):
    """A task folder whose files do not follow docs/task-format.md."""

    def __init__(self, file: Path | str, field: str, expected: str, got: object = None):
        self.file, self.field, self.expected = str(file), field, expected
        message = f"{file}: field '{field}': expected {expected}"
        if got is not None:
            message += f", got {got!r}"
        super().__init__(message)


@dataclass(frozen=True)
class Workload:
    """One problem size of a task. `dtype` is a torch dtype name; `params` are its shape parameters."""

    name: str
    split: str
    dtype: str
    params: dict[str, int | float | bool | str]
    note: str = ""
    latency_bound: bool = False  # timed by CUDA graph replay too, and that time is scored


@dataclass(frozen=True)
class InputSpec:
    name: str
    kind: str
    dtype: str | None
    shape: str
    doc: str
    written: bool


@dataclass(frozen=True)
class OutputSpec:
    """An output and the rule that compares it with the oracle's."""

    name: str
    dtype: str
    shape: str
    compare: str
    atol: dict[str, float]
    rtol: dict[str, float]
    scale_by_rms: bool
    max_code_step: int
    max_step_frac: float
    match_strides: bool

    def tolerances(self, dtype: str) -> tuple[float, float]:
        """(atol, rtol) for a workload of `dtype`."""
        return self.atol.get(dtype, self.atol.get("*", 0.0)), self.rtol.get(dtype, self.rtol.get("*", 0.0))


@dataclass(frozen=True)
class RubricProperty:
    id: str
    layer: str
    weight: float
    title: str
    verify: str
    h200_cost: str = ""  # what removing it cost on the H200 (ablation runs); never shown to a judge


@dataclass(frozen=True)
class Task:
    """A task folder, loaded and validated."""

    id: str
    family: str
    title: str
    bound: str
    latency_bound: bool
    description: str
    signature: str
    reference_note: str
    source: dict[str, str]
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    tolerance_method: str
    oracle_upcast: str
    roofline_bytes: str
    roofline_flops: str
    correctness_sets: int
    workloads: tuple[Workload, ...]
    profile_workload: str  # the scored workload the profile tool compiles on (its shapes pick the kernels' configs)
    rubric: tuple[RubricProperty, ...]
    guidance: dict[str, str]
    path: Path = field(compare=False)

    @property
    def reference_path(self) -> Path:
        return self.path / "reference.py"

    @property
    def expert_path(self) -> Path:
        return self.path / "expert.py"

    def split(self, name: str) -> tuple[Workload, ...]:
        """The workloads of one split (`scored`, `hidden` or `cpu`)."""
        return tuple(w for w in self.workloads if w.split == name)

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(f"task {self.id} has no workload {name!r} (it has: {', '.join(w.name for w in self.workloads)})")

    @property
    def returned_outputs(self) -> tuple[OutputSpec, ...]:
        """Outputs that `reference` returns (written inputs are compared, not returned)."""
        written = {i.name for i in self.inputs if i.written}
        return tuple(o for o in self.outputs if o.name not in written)

    @property
    def written_inputs(self) -> tuple[int, ...]:
        """Positions of the inputs that the kernel writes in place."""
        return tuple(i for i, spec in enumerate(self.inputs) if spec.written)

    def guidance_for(self, config: str) -> str:
        """The guidance text of a config (`none`, `L1`, `L1+L2`, `L1+L2+L3`)."""
        if config == "none":
            return ""
        layers = config.split("+")
        if layers != list(LAYERS[: len(layers)]):
            raise ValueError(f"guidance config must be none, L1, L1+L2 or L1+L2+L3, got {config!r}")
        return "\n\n".join(f"## {layer}\n\n{self.guidance[layer]}" for layer in layers)
