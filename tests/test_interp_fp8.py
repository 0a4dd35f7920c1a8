"""The interpreter's float -> fp8 cast, once patched, rounds like the sm_90 `cvt.rn.satfinite`.

The expected codes never come from the code under test (`interp_fp8.satfinite_cast`, i.e. torch's fp8
conversion): they come from tables worked out by hand from the formats' definitions, and from
`_reference_codes`, which decodes the codes from first principles and rounds to nearest, ties to
even, by exact float64 comparisons against the midpoints between neighbouring fp8 values.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from d2kbench.evaluate.interp_fp8 import satfinite_cast

FORMATS = {"float8_e4m3fn": (4, 3, 7), "float8_e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias
MAX_FINITE = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
SOURCES = {"float32": (torch.float32, torch.int32), "float16": (torch.float16, torch.int16),
           "bfloat16": (torch.bfloat16, torch.int16)}
INF = float("inf")

# (input, code) worked out by hand. e4m3fn: code = s.eeee.mmm, bias 7, subnormals m * 2^-9, largest
# finite 0x7E = 1.75 * 2^8 = 448, no infinities, 0x7F/0xFF NaN. The cast is round to nearest, ties to
# the even mantissa, and saturates (satfinite): beyond +-448, infinities included, gives +-448.
HAND_E4M3 = [
    (0.0, 0x00), (-0.0, 0x80), (1.0, 0x38), (-1.0, 0xB8), (1.125, 0x39), (1.875, 0x3F), (3.0, 0x44),
    (1.0625, 0x38),  # tie 1.0 | 1.125 -> even 1.0
    (-1.0625, 0xB8),
    (1.0625 + 2.0**-20, 0x39),  # just above that tie
    (1.1875, 0x3A),  # tie 1.125 | 1.25 -> even 1.25
    (1.1875 - 2.0**-20, 0x39),
    (1.9375, 0x40),  # tie 1.875 (0x3F) | 2.0: the carry moves into the exponent
    (-1.9375, 0xC0),
    (17.0, 0x58), (19.0, 0x5A),  # ties 16 | 18 -> 16 and 18 | 20 -> 20
    (0.30078125, 0x2A),  # between 0.28125 and 0.3125, above their midpoint 0.296875
    (240.0, 0x77), (248.0, 0x78),  # tie 240 | 256 -> 256, a new binade
    (432.0, 0x7E),  # tie 416 | 448 -> 448
    (448.0, 0x7E), (-448.0, 0xFE), (450.0, 0x7E), (500.0, 0x7E), (60000.0, 0x7E), (2.0**20, 0x7E),
    (-(2.0**20), 0xFE), (INF, 0x7E), (-INF, 0xFE),
    (2.0**-6, 0x08),  # smallest normal
    (2.0**-9, 0x01), (-(2.0**-9), 0x81),  # smallest subnormal
    (2.0**-10, 0x00), (-(2.0**-10), 0x80),  # tie 0 | 2^-9 -> 0, sign kept
    (2.0**-10 + 2.0**-14, 0x01),
    (3 * 2.0**-10, 0x02), (5 * 2.0**-10, 0x02), (7 * 2.0**-10, 0x04),  # subnormal ties
    (7 * 2.0**-9, 0x07),  # largest subnormal
    (15 * 2.0**-10, 0x08),  # tie 7 * 2^-9 | 2^-6 -> the smallest normal
    (2.0**-11, 0x00), (-(2.0**-30), 0x80),
]
# e5m2: code = s.eeeee.mm, bias 15, subnormals m * 2^-16, largest finite 0x7B = 1.75 * 2^15 = 57344,
# 0x7C inf, 0x7D-0x7F NaN.
HAND_E5M2 = [
    (0.0, 0x00), (-0.0, 0x80), (1.0, 0x3C), (1.25, 0x3D), (1.75, 0x3F),
    (1.125, 0x3C),  # tie 1.0 | 1.25 -> 1.0
    (1.375, 0x3E), (-1.375, 0xBE),  # tie 1.25 | 1.5 -> 1.5
    (1.125 + 2.0**-20, 0x3D),
    (1.875, 0x40),  # tie 1.75 | 2.0: carry into the exponent
    (0.30078125, 0x35),  # between 0.25 and 0.3125, above their midpoint 0.28125
    (49152.0, 0x7A), (53248.0, 0x7A),  # tie 49152 | 57344 -> 49152
    (57344.0, 0x7B), (-57344.0, 0xFB),
    (61440.0, 0x7B),  # tie 57344 | 65536: plain RNE would give inf (0x7C); satfinite saturates
    (65504.0, 0x7B), (2.0**17, 0x7B), (INF, 0x7B), (-INF, 0xFB),
    (2.0**-14, 0x04),  # smallest normal
    (2.0**-16, 0x01), (3 * 2.0**-16, 0x03),
    (2.0**-17, 0x00), (-(2.0**-17), 0x80),  # tie 0 | 2^-16 -> 0, sign kept
    (2.0**-17 + 2.0**-24, 0x01),
    (3 * 2.0**-17, 0x02), (5 * 2.0**-17, 0x02),
    (7 * 2.0**-17, 0x04),  # tie 3 * 2^-16 | 2^-14 -> the smallest normal
    (-(2.0**-30), 0x80),
]
HAND = {"float8_e4m3fn": HAND_E4M3, "float8_e5m2": HAND_E5M2}


def _decode(code: int, dst: str) -> float:
    e_bits, m_bits, bias = FORMATS[dst]
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> m_bits) & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
    if dst == "float8_e4m3fn" and e == 15 and m == 7:  # e4m3fn has no infinities: S.1111.111 is NaN
        return float("nan")
    if dst == "float8_e5m2" and e == 31:  # IEEE-style: infinity or NaN
        return sign * INF if m == 0 else float("nan")
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / 2**m_bits) * 2.0 ** (e - bias)


def _grid(dst: str) -> np.ndarray:
    """Values of the codes 0x00, 0x01, ...: the non-negative finite values, increasing with the code."""
    values = np.array([_decode(c, dst) for c in range(0x80)])
    return values[np.isfinite(values)]


def _is_nan_code(dst: str) -> np.ndarray:
    return np.isnan([_decode(c, dst) for c in range(256)])


def _reference_codes(x: np.ndarray, dst: str) -> np.ndarray:
    """cvt.rn.satfinite of float64 `x`: nearest value, ties to the even code (the mantissa's last bit),
    magnitudes past the largest finite value (infinities too) saturate to it, the sign is kept
    (-tiny -> -0). NaN inputs get -1: any NaN code is right for them."""
    grid = _grid(dst)
    mag = np.minimum(np.abs(x), grid[-1])
    lo = np.clip(np.searchsorted(grid, mag, side="right") - 1, 0, len(grid) - 1)
    hi = np.minimum(lo + 1, len(grid) - 1)
    mid = (grid[lo] + grid[hi]) / 2  # exact in float64 (fp8 values have <= 4 significant bits), as is mag
    code = np.where(mag < mid, lo, np.where(mag > mid, hi, np.where(lo % 2 == 0, lo, hi)))
    code = code | np.where(np.signbit(x), 0x80, 0)
    return np.where(np.isnan(x), -1, code)


def _wrong(x: torch.Tensor, codes: np.ndarray, dst: str) -> np.ndarray:
    """Indices where the fp8 `codes` of `x` differ from the reference."""
    want = _reference_codes(x.double().numpy(), dst)
    return np.flatnonzero(np.where(want < 0, ~_is_nan_code(dst)[codes], codes != want))


def _exact(values, dtype: torch.dtype) -> torch.Tensor:
    """`values` that `dtype` holds exactly, as `dtype`."""
    x64 = torch.tensor(values, dtype=torch.float64)
    x = x64.to(dtype)
    return x[(x.double() == x64) | x64.isnan()]


def _hand_inputs(src: str, dst: str) -> tuple[torch.Tensor, np.ndarray]:
    dtype = SOURCES[src][0]
    rows = [(v, c) for v, c in HAND[dst] if len(_exact([v], dtype))]
    return _exact([v for v, _ in rows], dtype), np.array([c for _, c in rows])


def _inputs(src: str, dst: str, n_random: int = 3000) -> torch.Tensor:
    """Every fp8 value and midpoint, one source ulp either side of each midpoint, specials, random
    bit patterns of the source type and log-uniform random magnitudes; both signs."""
    dtype, int_dtype = SOURCES[src]
    grid = _grid(dst)
    mids = (grid[1:] + grid[:-1]) / 2
    special = [INF, float("nan"), 0.0, 1e-9, 1e6, 2.0**20, 65504.0, 464.0, 61440.0]
    exact = np.concatenate([grid, mids, special])
    exact = _exact(np.concatenate([exact, -exact]).tolist(), dtype)
    mid_bits = _exact(np.concatenate([mids, -mids]).tolist(), dtype).view(int_dtype)
    neighbours = torch.cat([mid_bits + 1, mid_bits - 1]).view(dtype)
    rng = np.random.default_rng(0)
    width = torch.iinfo(int_dtype).bits
    bits = torch.from_numpy(rng.integers(-(2 ** (width - 1)), 2 ** (width - 1), n_random)).to(int_dtype)
    logu = rng.choice([-1.0, 1.0], n_random) * 2.0 ** rng.uniform(-20, 18, n_random)
    return torch.cat([exact, neighbours, bits.view(dtype), torch.from_numpy(logu).to(dtype)])


# Casts the saved input to the fp8 type in a Triton kernel under the interpreter, saves the codes.
PROBE = textwrap.dedent("""
    import sys, torch, triton, triton.language as tl
    from d2kbench.evaluate import interp_fp8

    @triton.jit
    def cast(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(y_ptr.dtype.element_ty), mask=offs < n)

    dst, patched, path_in, path_out = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
    if patched:
        assert interp_fp8.install()
    x = torch.load(path_in)
    y = torch.empty(x.shape, dtype=getattr(torch, dst))
    cast[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    torch.save(y.view(torch.uint8), path_out)
""")


def _interpreter_codes(x: torch.Tensor, dst: str, patched: bool, tmp_path) -> np.ndarray:
    path_in, path_out = tmp_path / "x.pt", tmp_path / "codes.pt"
    torch.save(x, path_in)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", PROBE, dst, "1" if patched else "0", str(path_in), str(path_out)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    codes = torch.load(path_out)
    assert codes.dtype == torch.uint8 and codes.shape == x.shape
    return codes.numpy().astype(np.int64)


def _describe(x: torch.Tensor, codes: np.ndarray, dst: str, wrong: np.ndarray) -> str:
    want = _reference_codes(x.double().numpy(), dst)
    return f"{len(wrong)} wrong, e.g. " + ", ".join(
        f"{x[i].item()!r}: got {codes[i]:#04x} want {want[i]:#04x}" for i in wrong[:8])


@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2"])
def test_reference_is_the_format(dst):
    """The reference's decoding matches the formats' known constants and the hand tables."""
    grid = _grid(dst)
    assert len(grid) == {"float8_e4m3fn": 0x7F, "float8_e5m2": 0x7C}[dst] and np.all(np.diff(grid) > 0)
    assert grid[-1] == MAX_FINITE[dst] and grid[1] == {"float8_e4m3fn": 2.0**-9, "float8_e5m2": 2.0**-16}[dst]
    assert _is_nan_code(dst).sum() == {"float8_e4m3fn": 2, "float8_e5m2": 6}[dst]
    values, codes = zip(*HAND[dst], strict=True)
    assert _reference_codes(np.array(values), dst).tolist() == list(codes)


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2"])
def test_patched_interpreter_casts_exactly(src, dst, tmp_path):
    hand_x, hand_codes = _hand_inputs(src, dst)
    x = torch.cat([hand_x, _inputs(src, dst)])
    x64 = x.double().numpy()
    grid = _grid(dst)
    ties = np.isin(np.abs(x64), (grid[1:] + grid[:-1]) / 2)
    assert len(hand_x) >= 25 and x.numel() > 6000 and ties.sum() >= 200  # the probe does exercise ties
    codes = _interpreter_codes(x, dst, patched=True, tmp_path=tmp_path)
    got_hand = codes[: len(hand_x)]
    assert got_hand.tolist() == hand_codes.tolist(), [
        (v, f"got {g:#04x} want {w:#04x}") for v, g, w in zip(hand_x.tolist(), got_hand, hand_codes, strict=True)
        if g != w]
    wrong = _wrong(x, codes, dst)
    assert len(wrong) == 0, _describe(x, codes, dst, wrong)


def test_unpatched_interpreter_misrounds_e4m3(tmp_path):
    """The reason for the patch: if this starts finding nothing wrong, Triton fixed its interpreter."""
    x = _inputs("float32", "float8_e4m3fn")
    codes = _interpreter_codes(x, "float8_e4m3fn", patched=False, tmp_path=tmp_path)
    assert len(_wrong(x, codes, "float8_e4m3fn")) > 0


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2"])
def test_satfinite_cast_matches_reference(src, dst):
    """satfinite_cast itself, on every 16-bit pattern and on random float32 patterns."""
    dtype = SOURCES[src][0]
    if src == "float32":
        bits = torch.from_numpy(np.random.default_rng(1).integers(-(2**31), 2**31, 200_000)).to(torch.int32)
    else:
        bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = torch.cat([bits.view(dtype), _hand_inputs(src, dst)[0]])
    codes = satfinite_cast(x, getattr(torch, dst), MAX_FINITE[dst]).view(torch.uint8).numpy().astype(np.int64)
    wrong = _wrong(x, codes, dst)
    assert len(wrong) == 0, _describe(x, codes, dst, wrong)


def test_satfinite_cast_saturates_and_keeps_nan():
    x = torch.tensor([1e6, -1e6, 449.0, INF, -INF, float("nan"), 0.3, -0.0])
    y = satfinite_cast(x, torch.float8_e4m3fn, 448.0)
    assert y.float()[:5].tolist() == [448.0, -448.0, 448.0, 448.0, -448.0] and y.float()[5].isnan()
    # 0.3 (as float32) lies between 0.28125 (0x29) and 0.3125 (0x2A), above their midpoint 0.296875
    assert y.view(torch.uint8)[6:].tolist() == [0x2A, 0x80]
