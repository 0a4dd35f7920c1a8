"""Compile a candidate's Triton kernels for the H200 (sm_90) on a machine without a GPU.

Inside a worker (without TRITON_INTERPRET), `run(*inputs)` is called with Triton's launch path
replaced: each launch is turned into `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90,
32))` with the launch's argument types and constexprs, and nothing executes. The compiled
kernel's metadata gives registers, spills, shared memory, warps, stages and whether `wgmma`, TMA and warp
specialization are used.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def specialize(param: Any, value: Any) -> tuple[str, bool]:
    """The argument's type as the launcher specializes it, and whether it is marked divisible by 16.

    Triton's own rules (`native_specialize_impl`, what its launcher calls): an int equal to 1 becomes the
    constant 1 (a unit stride: what tells the compiler a tile is contiguous, so that its loads vectorise and
    pipeline), 16-byte-aligned pointers and multiples of 16 are divisible. Without the unit-stride rule
    muon's product kernels compiled without cp.async, at 255 registers, where the launched ones had 112-182
    (bench/results/2026-12-04-h200-owed-10, the profile tool's report against its ncu summary).
    """
    from triton._C.libtriton import native_specialize_impl  # Triton 3.6 and 3.9 alike
    from triton.backends.nvidia.compiler import CUDABackend

    kind, key = native_specialize_impl(CUDABackend, value, bool(getattr(param, "is_const", False)),
                                       not getattr(param, "do_not_specialize", False),
                                       not getattr(param, "do_not_specialize_on_alignment", False))
    return kind, isinstance(key, str) and "D" in key


class CompileCapture:
    """Replaces Triton launches with sm_90 compilation while installed."""

    def __init__(self, arch: int = 90):
        self.arch = arch
        self.reports: list[dict[str, Any]] = []
        self._seen: dict[str, dict[str, Any]] = {}  # one compile per specialisation (muon launches 19 times)
        self._saved: list[tuple[type, Any]] = []

    def install(self) -> None:
        from triton.runtime import autotuner, jit

        capture = self

        def jit_run(fn, *args, grid=None, warmup=False, **kwargs):
            capture.compile(fn, args, kwargs, grid)

        def autotune_run(tuner, *args, **kwargs):
            for config in tuner.configs:
                merged = {**kwargs, **config.all_kwargs()}
                tuner.fn.run(*args, **merged)

        for cls, replacement in ((jit.JITFunction, jit_run), (autotuner.Autotuner, autotune_run)):
            self._saved.append((cls, cls.run))
            cls.run = replacement

    def uninstall(self) -> None:
        for cls, original in reversed(self._saved):
            cls.run = original
        self._saved.clear()

    def compile(self, fn, args: tuple, kwargs: dict[str, Any], grid: Any = None) -> None:
        import triton

        launch_options = ("num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl")
        options = {k: kwargs.pop(k) for k in launch_options if k in kwargs}
        values: dict[str, Any] = {}
        for param, name in zip(fn.params, fn.arg_names, strict=True):
            if len(values) < len(args):
                values[name] = args[len(values)]
            elif name in kwargs:
                values[name] = kwargs[name]
            elif param.has_default:
                values[name] = param.default
        signature, constexprs, attrs = {}, {}, {}
        for index, (param, name) in enumerate(zip(fn.params, fn.arg_names, strict=True)):
            value = values.get(name)
            kind, divisible = ("constexpr", None) if param.is_constexpr else specialize(param, value)
            if kind == "constexpr":
                signature[name] = "constexpr"
                constexprs[name] = value
                continue
            signature[name] = kind
            if divisible:
                attrs[(index,)] = [["tt.divisibility", 16]]
        report: dict[str, Any] = {"kernel": fn.__name__, "constexprs": {k: repr(v) for k, v in constexprs.items()},
                                  "num_warps": options.get("num_warps", 4), "num_stages": options.get("num_stages", 3),
                                  "triton": triton.__version__}
        key = repr((id(fn), sorted(signature.items()), report["constexprs"], sorted(attrs), sorted(options.items())))
        if key not in self._seen:
            self._seen[key] = self._compile(fn, signature, constexprs, attrs, options, report)
        self.reports.append({**self._seen[key], **launch_shape(grid, values, self._seen[key].get("programs_per_sm"))})

    def _compile(self, fn, signature: dict, constexprs: dict, attrs: dict, options: dict,
                 report: dict[str, Any]) -> dict[str, Any]:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        try:
            compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                                      target=GPUTarget("cuda", self.arch, 32), options=options)
            md = compiled.metadata
            ptx = compiled.asm.get("ptx", "")
            report.update(ok=True, shared_bytes=int(getattr(md, "shared", 0)), **ptx_features(ptx),
                          ptx_lines=ptx.count("\n"), **ptxas_info(ptx))
            if "registers" in report:
                report["programs_per_sm"], report["programs_limited_by"] = programs_per_sm(
                    report["registers"], report["num_warps"], report["shared_bytes"])
        except Exception as exc:  # noqa: BLE001 - a compile failure is the report
            report.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:2000]}")
        return report


def launch_shape(grid: Any, arguments: dict[str, Any], per_sm: int | None) -> dict[str, Any]:
    """The launch's grid, its programs and, where the programs per SM are known, its waves on the H200's SMs: a
    grid of 2.67 waves leaves a third of its last wave idle (attention's 128k sequence, 264 splits x 4 KV heads at
    three programs per SM). Nothing where the grid cannot be read (a grid function that fails on these arguments)."""
    try:
        dims = tuple(int(d) for d in (grid(arguments) if callable(grid) else grid))
    except Exception:  # noqa: BLE001 - the report then goes without its grid
        return {}
    programs = 1
    for d in dims:
        programs *= d
    shape: dict[str, Any] = {"grid": list(dims), "programs": programs}
    if per_sm:
        shape["waves"] = programs / (per_sm * H200_SMS)
    return shape


H200_SMS = 132                  # the SMs a launch's waves are counted on

# Per-SM limits of compute capability 9.0 (the CUDA occupancy calculator's table for the H100/H200).
SM90_REGISTERS = 65536          # 32-bit registers per SM...
SM90_REGISTER_UNIT = 256        # ...allocated per warp in units of this many
SM90_MAX_WARPS = 64
SM90_MAX_PROGRAMS = 32          # resident blocks per SM
SM90_SHARED_BYTES = 233472      # shared memory per SM (228 KB)...
SM90_SHARED_RESERVED = 1024     # ...of which the driver keeps this much per block


def programs_per_sm(registers: int, num_warps: int, shared_bytes: int) -> tuple[int, str]:
    """How many programs of a kernel one SM holds at once, and what limits it (`registers`, `shared memory`,
    `warps`, `the 32-program limit`; ties name both). One program per SM leaves no other program to hide its
    latency: muon's symmetric products at 134 registers x 8 warps ran so on the H200 (ncu: 4608 programs in 34.9
    waves over 132 SMs, bench/results/2026-12-04-h200-sweep-16 call7)."""
    per_warp = -(-registers * 32 // SM90_REGISTER_UNIT) * SM90_REGISTER_UNIT
    limits = {
        "registers": (SM90_REGISTERS // per_warp) // num_warps if per_warp else SM90_MAX_PROGRAMS,
        "shared memory": SM90_SHARED_BYTES // (shared_bytes + SM90_SHARED_RESERVED),
        "warps": SM90_MAX_WARPS // num_warps,
        "the 32-program limit": SM90_MAX_PROGRAMS,
    }
    least = min(limits.values())
    return least, " and ".join(name for name, n in limits.items() if n == least)


def ptx_features(ptx: str) -> dict[str, bool]:
    """Whether the PTX uses wgmma, TMA (bulk tensor loads or stores), asynchronous copies into shared memory
    (`cp.async`: Triton emits them only where it can prove 4-16 byte alignment, so a row stride that is not a multiple
    of 16 elements loses them and the pipelined operands pass through registers: muon's hidden odd sizes spill so),
    warp specialization (partitions that trade registers with `setmaxnreg`) and programmatic dependent launch
    (`griddepcontrol`: waiting for the kernel before, or letting the next one start)."""
    return {"wgmma": "wgmma" in ptx, "tma": "cp.async.bulk.tensor" in ptx,
            "cp_async": re.search(r"cp\.async\.c[ag]\.shared", ptx) is not None,
            "warp_specialized": "setmaxnreg" in ptx, "dependent_launch": "griddepcontrol" in ptx}


def ptxas_info(ptx: str) -> dict[str, int | str]:
    """Registers and spill bytes per thread, from `ptxas -v` (the ptxas that Triton ships), and
    `wgmma_serialized`: ptxas's reason where it made every wgmma of the kernel wait for the one before (its C7515
    warning). The serialized kernel still compiles and looks the same in every other count here: muon's symmetric
    product with one accumulator merged from two K loops ran 4-14% slower so (bench/results/2026-12-07-h100-owed-38)."""
    target = re.search(r"^\.target\s+sm_(\d+)", ptx, re.M)
    if not target:
        return {}
    try:  # the ptxas Triton itself compiles with (Triton 3.6 and 3.9 keep it here)
        from triton.backends.nvidia.compiler import get_ptxas

        tool = get_ptxas(int(target.group(1)))
        ptxas = Path(tool.path if hasattr(tool, "path") else tool)
    except (ImportError, AttributeError, TypeError):
        return {}
    target = re.search(r"^\.target\s+(sm_\w+)", ptx, re.M)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run([str(ptxas), f"-arch={target.group(1)}", "-v", str(src), "-o", str(Path(tmp) / "k.o")],
                              capture_output=True, text=True, timeout=120)
    text = proc.stdout + proc.stderr
    info = {}
    if m := re.search(r"Used (\d+) registers", text):
        info["registers"] = int(m.group(1))
    if m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text):
        info["spill_store_bytes"], info["spill_load_bytes"] = int(m.group(1)), int(m.group(2))
    if m := re.search(r"(\d+) bytes stack frame", text):
        info["stack_frame_bytes"] = int(m.group(1))
    if m := re.search(r"wgmma\.mma_async instructions are serialized due to (.+?) in the function", text):
        info["wgmma_serialized"] = m.group(1)
    return info
