"""Correct float -> fp8 casts in Triton's CPU interpreter, so interpreted kernels round like the GPU.

The interpreter converts floats to fp8 with its own bit arithmetic, which rounds wrongly for
e4m3: a mantissa carry into the exponent is dropped, ties go away from zero and subnormals are
truncated (about 1-3% of codes differ from the hardware's). On sm_90 Triton emits
`cvt.rn.satfinite.{e4m3,e5m2}x2.f32`: round to nearest even, out-of-range values (infinities too)
saturate to the largest finite value, NaN stays NaN. `install()` routes the interpreter's
downcasts from fp32/fp16/bf16 to e4m3 (fp8e4nv) and e5m2 (fp8e5) through torch's exactly rounded
CPU conversion with that saturation; every other conversion keeps the interpreter's own code.
Workers call it only when they run kernels through the interpreter.
"""

from __future__ import annotations

import numpy as np
import torch

_FP8 = {"fp8e4nv": (torch.float8_e4m3fn, 448.0), "fp8e5": (torch.float8_e5m2, 57344.0)}
_WIDE = {"fp32": (np.uint32, torch.float32), "fp16": (np.uint16, torch.float16), "bf16": (np.uint16, torch.bfloat16)}


def satfinite_cast(values: torch.Tensor, fp8: torch.dtype, max_finite: float) -> torch.Tensor:
    """Round to nearest even in `fp8`, saturating to +-max_finite (NaN stays NaN): the sm_90 cvt's semantics."""
    x = values.float()
    return torch.where(x.isnan(), x, x.clamp(-max_finite, max_finite)).to(fp8)


def install() -> bool:
    """Patch the interpreter's float conversion; False (nothing changed) if this Triton has no such hook."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_convert_float", None)
    if original is None or getattr(original, "_d2k_exact_fp8", False):
        return original is not None

    def convert_float(input, input_dtype, output_dtype, rounding_mode):  # noqa: A002 - the interpreter's signature
        src, dst = _WIDE.get(input_dtype.name), _FP8.get(output_dtype.name)
        rtne = rounding_mode is None or rounding_mode == interpreter._ir.ROUNDING_MODE.RTNE
        if src is None or dst is None or not rtne:
            return original(input, input_dtype, output_dtype, rounding_mode)
        bits = np.ascontiguousarray(input).view(src[0])
        values = torch.from_numpy(bits.copy()).view(src[1])
        codes = satfinite_cast(values, *dst).view(torch.uint8).numpy()
        return codes.reshape(np.shape(input))

    convert_float._d2k_exact_fp8 = True
    interpreter._convert_float = convert_float
    return True
