"""Load task folders into `Task` records, validating every field on the way in."""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from d2kbench.suite import expr
from d2kbench.suite.schema import (
    BOUNDS,
    COMPARE_KINDS,
    CPU_DTYPES,
    DTYPES,
    FAMILIES,
    INPUT_KINDS,
    LAYERS,
    SPLITS,
    InputSpec,
    OutputSpec,
    RubricProperty,
    Task,
    TaskFormatError,
    Workload,
)

TASKS_ROOT = Path(__file__).resolve().parent.parent / "tasks"
_NAME = re.compile(r"^[a-z0-9_]+$")
_MISSING = object()


class _Fields:
    """Typed access to one TOML table, raising `TaskFormatError` with the file and field path."""

    def __init__(self, file: Path, table: Any, where: str = ""):
        self.file, self.where = file, where
        if not isinstance(table, dict):
            raise TaskFormatError(file, where or "<top>", "a table", table)
        self.table = table

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, types: type | tuple[type, ...], expected: str, default: Any = _MISSING) -> Any:
        value = self.table.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise TaskFormatError(self.file, self._path(key), f"{expected} (the field is missing)")
            return default
        # TOML booleans are ints in Python: never accept one where a number is expected.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            raise TaskFormatError(self.file, self._path(key), expected, value)
        return value

    def text(self, key: str, default: Any = _MISSING) -> str:
        value = self.get(key, str, "a string", default)
        if value is not default and not value.strip():
            raise TaskFormatError(self.file, self._path(key), "a non-empty string", value)
        return value

    def name(self, key: str) -> str:
        value = self.text(key)
        if not _NAME.match(value):
            raise TaskFormatError(self.file, self._path(key), "a name of [a-z0-9_]+", value)
        return value

    def identifier(self, key: str) -> str:
        value = self.text(key)
        if not value.isidentifier():
            raise TaskFormatError(self.file, self._path(key), "a Python identifier", value)
        return value

    def choice(self, key: str, options: tuple[str, ...], default: Any = _MISSING) -> str:
        value = self.get(key, str, f"one of {', '.join(options)}", default)
        if value not in options:
            raise TaskFormatError(self.file, self._path(key), f"one of {', '.join(options)}", value)
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        return self.get(key, bool, "true or false", default)

    def number(self, key: str, default: Any = _MISSING, minimum: float | None = None) -> float:
        value = self.get(key, (int, float), "a number", default)
        if minimum is not None and value < minimum:
            raise TaskFormatError(self.file, self._path(key), f"a number >= {minimum}", value)
        return value

    def per_dtype(self, key: str) -> dict[str, float]:
        """A tolerance: a number for every dtype, or a table keyed by dtype name."""
        value = self.table.get(key, 0.0)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"*": float(value)}
        if isinstance(value, dict):
            out = {}
            for dtype, tol in value.items():
                if dtype not in DTYPES or isinstance(tol, bool) or not isinstance(tol, (int, float)):
                    raise TaskFormatError(
                        self.file, self._path(f"{key}.{dtype}"), "a number keyed by a dtype name", tol
                    )
                out[dtype] = float(tol)
            return out
        raise TaskFormatError(self.file, self._path(key), "a number or a table keyed by dtype", value)

    def tables(self, key: str) -> list[_Fields]:
        value = self.get(key, list, "an array of tables")
        return [_Fields(self.file, item, f"{self._path(key)}[{i}]") for i, item in enumerate(value)]

    def sub(self, key: str, default: Any = _MISSING) -> _Fields:
        return _Fields(self.file, self.get(key, dict, "a table", default), self._path(key))


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _read_text(file: Path) -> str:
    if not file.is_file():
        raise TaskFormatError(file, "<file>", "the file to exist")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFormatError(file, "<encoding>", f"UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_toml(file: Path) -> dict:
    text = _read_text(file)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(file, "<syntax>", f"valid TOML ({exc})") from None


def _inputs(f: _Fields) -> tuple[InputSpec, ...]:
    specs = []
    for t in f.tables("inputs"):
        kind = t.choice("kind", INPUT_KINDS, "tensor")
        dtype = None
        if kind == "tensor":
            dtype = t.text("dtype")
            if dtype != "workload" and dtype not in DTYPES:
                raise TaskFormatError(f.file, t._path("dtype"), f"'workload' or one of {', '.join(DTYPES)}", dtype)
        specs.append(
            InputSpec(
                name=t.identifier("name"),
                kind=kind,
                dtype=dtype,
                shape=t.text("shape", ""),
                doc=t.text("doc", ""),
                written=t.flag("written"),
            )
        )
    if not specs:
        raise TaskFormatError(f.file, "inputs", "at least one input")
    return tuple(specs)


def _outputs(f: _Fields) -> tuple[OutputSpec, ...]:
    specs = []
    for t in f.tables("outputs"):
        dtype = t.text("dtype")
        if dtype != "workload" and dtype not in DTYPES:
            raise TaskFormatError(f.file, t._path("dtype"), f"'workload' or one of {', '.join(DTYPES)}", dtype)
        compare = t.choice("compare", COMPARE_KINDS)
        if compare == "allclose" and "atol" not in t.table and "rtol" not in t.table:
            raise TaskFormatError(f.file, t._path("atol"), "atol and/or rtol for compare = 'allclose'")
        specs.append(
            OutputSpec(
                name=t.identifier("name"),
                dtype=dtype,
                shape=t.text("shape", ""),
                compare=compare,
                atol=t.per_dtype("atol"),
                rtol=t.per_dtype("rtol"),
                scale_by_rms=t.flag("scale_by_rms"),
                max_code_step=int(t.number("max_code_step", 0, minimum=0)),
                max_step_frac=float(t.number("max_step_frac", 0.0, minimum=0.0)),
                match_strides=t.flag("match_strides"),
            )
        )
    if not specs:
        raise TaskFormatError(f.file, "outputs", "at least one output")
    return tuple(specs)


def _workloads(f: _Fields, latency_bound: bool) -> tuple[Workload, ...]:
    """The workloads; each is latency-bound if it says so, else if the task says so."""
    workloads = []
    for t in f.tables("workloads"):
        w = Workload(
            name=t.name("name"),
            split=t.choice("split", SPLITS),
            dtype=t.choice("dtype", DTYPES),
            params=dict(t.get("params", dict, "a table of parameters")),
            note=t.text("note", ""),
            latency_bound=t.flag("latency_bound", latency_bound),
        )
        for key, value in w.params.items():
            if not isinstance(value, (int, float, bool, str)):
                raise TaskFormatError(f.file, t._path(f"params.{key}"), "a number, boolean or string", value)
        if w.split == "cpu" and w.dtype not in CPU_DTYPES:
            raise TaskFormatError(
                f.file, t._path("dtype"), "float16 or float32 on a cpu workload (the interpreter mishandles bf16)",
                w.dtype,
            )
        workloads.append(w)
    seen: set[str] = set()
    for i, w in enumerate(workloads):
        if w.name in seen:
            raise TaskFormatError(f.file, f"workloads[{i}].name", "a name unique in the task", w.name)
        seen.add(w.name)
    for split in SPLITS:
        if not any(w.split == split for w in workloads):
            raise TaskFormatError(f.file, "workloads", f"at least one workload with split = '{split}'")
    return tuple(workloads)


def _roofline(f: _Fields) -> tuple[str, str]:
    table = f.sub("roofline")
    formulas = []
    for key in ("bytes", "flops"):
        text = table.text(key)
        try:
            expr.parse(text)
        except expr.ExprError as exc:
            raise TaskFormatError(f.file, f"roofline.{key}", f"an arithmetic expression ({exc})") from None
        formulas.append(text)
    return formulas[0], formulas[1]


def _rubric(file: Path) -> tuple[RubricProperty, ...]:
    f = _Fields(file, _read_toml(file))
    props = []
    for t in f.tables("property"):
        props.append(
            RubricProperty(
                id=t.name("id"),
                layer=t.choice("layer", LAYERS),
                weight=float(t.number("weight", minimum=0.0)),
                title=t.text("title"),
                verify=t.text("verify"),
                h200_cost=t.text("h200_cost", default=""),
            )
        )
        if props[-1].weight <= 0:
            raise TaskFormatError(file, f"property[{len(props) - 1}].weight", "a number > 0", props[-1].weight)
    ids = [p.id for p in props]
    for i, pid in enumerate(ids):
        if pid in ids[:i]:
            raise TaskFormatError(file, f"property[{i}].id", "an id unique in the rubric", pid)
    for layer in LAYERS:
        if sum(p.layer == layer for p in props) < 3:
            raise TaskFormatError(file, "property", f"at least 3 properties with layer = '{layer}'")
    return tuple(props)


def _guidance(file: Path) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in _read_text(file).splitlines():
        heading = re.match(r"^##\s+(\S+)\s*$", line)
        if heading:
            current = heading.group(1)
            if current not in LAYERS or current in sections:
                raise TaskFormatError(file, f"## {current}", "the sections ## L1, ## L2, ## L3, once each")
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if list(sections) != list(LAYERS):
        raise TaskFormatError(file, "sections", "## L1, ## L2 and ## L3 in that order", list(sections))
    out = {layer: "\n".join(lines).strip() for layer, lines in sections.items()}
    for layer, text in out.items():
        if not text:
            raise TaskFormatError(file, f"## {layer}", "prose under the heading")
    return out


def load_task(path: Path | str) -> Task:
    """Load and validate the task folder at `path`."""
    path = Path(path).resolve()
    toml_file = path / "task.toml"
    f = _Fields(toml_file, _read_toml(toml_file))
    task_id = f.name("id")
    if task_id != path.name:
        raise TaskFormatError(toml_file, "id", f"the folder name {path.name!r}", task_id)
    family = f.choice("family", FAMILIES)
    inputs = _inputs(f)
    outputs = _outputs(f)
    output_names = [o.name for o in outputs]
    for i, spec in enumerate(inputs):
        if spec.written and spec.name not in output_names:
            raise TaskFormatError(
                toml_file, f"inputs[{i}].written", f"an [[outputs]] entry named {spec.name!r} for its tolerances"
            )
    latency_bound = f.flag("latency_bound")
    workloads = _workloads(f, latency_bound)
    roof_bytes, roof_flops = _roofline(f)
    scored = tuple(w.name for w in workloads if w.split == "scored")
    for file in ("reference.py", "expert.py"):
        if not (path / file).is_file():
            raise TaskFormatError(path / file, "<file>", "the file to exist")
    return Task(
        id=task_id,
        family=family,
        title=f.text("title"),
        bound=f.choice("bound", BOUNDS),
        latency_bound=latency_bound,
        description=f.text("description"),
        signature=f.text("signature"),
        reference_note=f.text("reference_note", ""),
        source={k: str(v) for k, v in f.sub("source").table.items()},
        inputs=inputs,
        outputs=outputs,
        tolerance_method=f.sub("tolerance").text("method"),
        oracle_upcast=f.sub("oracle", {}).choice("upcast", ("float32", "float64"), "float32"),
        roofline_bytes=roof_bytes,
        roofline_flops=roof_flops,
        correctness_sets=int(f.number("correctness_sets", 3, minimum=3)),
        workloads=workloads,
        profile_workload=f.choice("profile_workload", scored, scored[0]) if scored else "",
        rubric=_rubric(path / "rubric.toml"),
        guidance=_guidance(path / "guidance.md"),
        path=path,
    )


def task_dirs(root: Path = TASKS_ROOT) -> list[Path]:
    """Every task folder under `root` (`<family>/<task_id>/task.toml`), sorted by id."""
    return sorted((p.parent for p in root.glob("*/*/task.toml")), key=lambda p: p.name)


@cache
def load_suite(root: Path = TASKS_ROOT) -> tuple[Task, ...]:
    """All tasks of the suite, validated."""
    tasks = tuple(load_task(p) for p in task_dirs(root))
    for t in tasks:
        if t.path.parent.name != t.family:
            raise TaskFormatError(t.path / "task.toml", "family", f"the parent folder {t.path.parent.name!r}", t.family)
    return tasks


def find_task(ref: str) -> Task:
    """A task by id, or by the path of its folder."""
    if "/" in ref or Path(ref).is_dir():
        return load_task(ref)
    for p in task_dirs():
        if p.name == ref:
            return load_task(p)
    known = ", ".join(p.name for p in task_dirs())
    raise KeyError(f"no task {ref!r}; known tasks: {known}")


def roofline(task: Task, workload: Workload, derived: dict[str, float] | None = None) -> tuple[float, float]:
    """(bytes, flops) of `workload` from the task's formulas."""
    env = {k: float(v) for k, v in workload.params.items() if isinstance(v, (int, float))}
    env.update(derived or {})
    return expr.evaluate(task.roofline_bytes, env), expr.evaluate(task.roofline_flops, env)
