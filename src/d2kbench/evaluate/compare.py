"""Compare a candidate's outputs with the oracle's, in the parent, by the task's rules."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from d2kbench.suite import OutputSpec


@dataclass(frozen=True)
class Mismatch:
    reason: str  # nan | mismatch | shape | dtype | strides
    detail: str


def _where(mask: torch.Tensor) -> str:
    idx = mask.nonzero()
    first = tuple(int(i) for i in idx[0]) if len(idx) else ()
    return f"{int(mask.sum())} of {mask.numel()} elements, first at {first}"


def _layout(shape, strides) -> list[int | None] | None:
    """Strides that matter: those of dimensions longer than one (a size-1 dimension has any stride)."""
    if strides is None:
        return None
    return [st if n > 1 else None for n, st in zip(shape, strides, strict=True)]


def compare_output(
    spec: OutputSpec,
    got: torch.Tensor,
    expected: torch.Tensor,
    workload_dtype: str,
    got_strides: list[int] | None = None,
    expected_strides: list[int] | None = None,
) -> Mismatch | None:
    """None when `got` matches `expected` under `spec`'s rule, else what is wrong."""
    name = spec.name
    if tuple(got.shape) != tuple(expected.shape):
        return Mismatch("shape", f"{name}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    want_dtype = workload_dtype if spec.dtype == "workload" else spec.dtype
    if str(got.dtype).removeprefix("torch.") != want_dtype:
        return Mismatch("dtype", f"{name}: dtype {got.dtype}, expected {want_dtype}")
    if spec.match_strides and got.numel() > 1 and _layout(got.shape, got_strides) != _layout(
        expected.shape, expected_strides
    ):
        return Mismatch("strides", f"{name}: strides {got_strides}, expected {expected_strides}")
    if got.numel() == 0:
        return None
    if spec.compare == "exact":
        bad = got != expected
        if bool(bad.any()):
            return Mismatch("mismatch", f"{name}: differs exactly in {_where(bad)}")
        return None
    if spec.compare == "fp8":
        return _compare_fp8(spec, got, expected)
    return _compare_close(spec, got, expected, workload_dtype)


def _compare_close(spec: OutputSpec, got: torch.Tensor, expected: torch.Tensor, dtype: str) -> Mismatch | None:
    atol, rtol = spec.tolerances(dtype)
    g = got.to(torch.float64)
    e = expected.to(torch.float64)
    g_fin, e_fin = torch.isfinite(g), torch.isfinite(e)
    # A non-finite value passes only where the oracle has the same non-finite value.
    nonfinite_ok = (~g_fin) & (~e_fin) & ((g == e) | (torch.isnan(g) & torch.isnan(e)))
    bad_nonfinite = (~g_fin | ~e_fin) & ~nonfinite_ok
    if bool(bad_nonfinite.any()):
        reason = "nan" if bool((torch.isnan(g) & ~torch.isnan(e)).any()) else "mismatch"
        return Mismatch(reason, f"{spec.name}: non-finite values where the oracle has none (or the reverse) in "
                        f"{_where(bad_nonfinite)}")
    both = g_fin & e_fin
    if spec.scale_by_rms:
        rms = float(e[both].pow(2).mean().sqrt()) if bool(both.any()) else 0.0
        atol = atol * rms
    err = (g - e).abs()
    limit = atol + rtol * e.abs()
    bad = both & (err > limit)
    if bool(bad.any()):
        worst = int(torch.argmax(torch.where(both, err - limit, torch.zeros_like(err))))
        return Mismatch(
            "mismatch",
            f"{spec.name}: outside atol={atol:.3g} rtol={rtol:.3g} in {_where(bad)}; "
            f"max abs error {float(err[both].max()):.4g} (at flat index {worst}: got {float(g.flatten()[worst]):.6g}, "
            f"expected {float(e.flatten()[worst]):.6g})",
        )
    return None


def _fp8_order(codes: torch.Tensor) -> torch.Tensor:
    """Map float8 bit patterns to integers that are consecutive for consecutive values."""
    u = codes.view(torch.uint8).to(torch.int16)
    magnitude = u & 0x7F
    return torch.where(u & 0x80 != 0, -magnitude, magnitude)


def _compare_fp8(spec: OutputSpec, got: torch.Tensor, expected: torch.Tensor) -> Mismatch | None:
    if expected.dtype != got.dtype:
        expected = expected.to(got.dtype)
    g_nan = torch.isnan(got.to(torch.float32))
    e_nan = torch.isnan(expected.to(torch.float32))
    if bool((g_nan & ~e_nan).any()):
        return Mismatch("nan", f"{spec.name}: NaN codes in {_where(g_nan & ~e_nan)}")
    step = (_fp8_order(got) - _fp8_order(expected)).abs()
    step = torch.where(e_nan, torch.zeros_like(step), step)
    if bool((step > spec.max_code_step).any()):
        return Mismatch("mismatch", f"{spec.name}: codes differ by more than {spec.max_code_step} step(s) in "
                        f"{_where(step > spec.max_code_step)}")
    frac = float((step > 0).float().mean())
    if frac > spec.max_step_frac:
        return Mismatch("mismatch", f"{spec.name}: {frac:.3%} of codes differ, more than the "
                        f"{spec.max_step_frac:.3%} allowed")
    return None


def output_error(spec: OutputSpec, got: torch.Tensor, expected: torch.Tensor) -> float | None:
    """How far `got` is from the oracle: the relative RMS error ||got - oracle|| / ||oracle|| over the
    finite elements (allclose outputs), the share of codes that differ (fp8); None for other rules."""
    if got.shape != expected.shape or got.numel() == 0:
        return None
    if spec.compare == "fp8":
        g, e = got.view(torch.uint8), expected.to(got.dtype).view(torch.uint8)
        return float((g != e).double().mean())
    if spec.compare != "allclose":
        return None
    g, e = got.to(torch.float64), expected.to(torch.float64)
    both = torch.isfinite(g) & torch.isfinite(e)
    norm = float(e[both].norm())
    return float((g - e)[both].norm()) / norm if norm > 0 else None
