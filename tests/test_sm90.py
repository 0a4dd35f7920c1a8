"""The sm_90 compile report specializes a kernel's arguments as Triton's launcher does: otherwise it reports
another kernel than the one that runs (muon's product kernels: 255 registers and a spill in the report, 112-182
registers and no spill in ncu's summary of the launched ones; bench/results/2026-12-04-h200-owed-10). It also says
where ptxas serialized a kernel's wgmma instructions, which nothing else in the report shows."""

from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl

from d2kbench.evaluate.sm90 import CompileCapture, specialize

PARAM = SimpleNamespace(do_not_specialize=False, do_not_specialize_on_alignment=False, is_const=False)


@pytest.mark.parametrize(("value", "kind", "divisible"), [
    (1, "constexpr", False),  # a unit stride: the tile is known contiguous
    (32, "i32", True), (17, "i32", False), (2**40, "i64", True),
    (torch.empty(64, dtype=torch.float16), "*fp16", True),
    (torch.empty(64, dtype=torch.float16)[1:], "*fp16", False),  # 2 bytes past an aligned start
    (0.5, "fp32", False),
])
def test_arguments_are_specialized_as_the_launcher_does(value, kind, divisible):
    assert specialize(PARAM, value) == (kind, divisible)


def test_an_unspecialized_argument_stays_an_argument():
    param = SimpleNamespace(**{**vars(PARAM), "do_not_specialize": True})
    assert specialize(param, 1) == ("i32", False)


@triton.jit
def _rows_copy(x_ptr, y_ptr, stride_row, stride_col, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    tile = tl.load(x_ptr + rows * stride_row + cols * stride_col)
    tl.store(y_ptr + rows * BLOCK + cols, tile)


def test_a_unit_stride_compiles_to_vector_loads(monkeypatch):
    """Known to be 1, the column stride makes each row contiguous: 16-byte loads (ld.global.v4) in the PTX."""
    x, y = torch.empty(64, 64, dtype=torch.float32), torch.empty(64, 64, dtype=torch.float32)
    compile_kernel, ptx = triton.compile, []

    def keep_ptx(*args, **kwargs):
        kernel = compile_kernel(*args, **kwargs)
        ptx.append(kernel.asm["ptx"])
        return kernel

    monkeypatch.setattr(triton, "compile", keep_ptx)
    capture = CompileCapture()
    capture.install()
    try:
        _rows_copy[(1,)](x, y, x.stride(0), x.stride(1), BLOCK=64)
    finally:
        capture.uninstall()
    (report,) = capture.reports
    assert report["ok"], report.get("error")
    assert report["constexprs"]["stride_col"] == "1" and "stride_row" not in report["constexprs"]
    assert ptx and ptx[0].count("ld.global.v4") > 0


@triton.jit
def _tile_product(a_ptr, b_ptr, K, SELF: tl.constexpr, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    """A[:, :K] A[:, :K]^T from one loaded panel (SELF), or A[:, :K] B[:K, :]."""
    rows = tl.arange(0, BLOCK)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        lhs = tl.load(a_ptr + rows[:, None] * K + (k0 + offs_k)[None, :])
        if SELF:
            rhs = tl.trans(lhs)
        else:
            rhs = tl.load(b_ptr + (k0 + offs_k)[:, None] * BLOCK + rows[None, :])
        acc = tl.dot(lhs, rhs, acc)
    return acc


@triton.jit
def _one_or_two_k_loops(a_ptr, b_ptr, c_ptr, K, self_tile, TWO: tl.constexpr, BLOCK: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """TWO: muon's first SYM_SELF_DIAGONAL, one accumulator from either of two K loops (a runtime choice), then
    one store; else one K loop."""
    c_ptrs = c_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    if TWO and self_tile > 2:
        acc = _tile_product(a_ptr, b_ptr, K, True, BLOCK, BLOCK_K)
    else:
        acc = _tile_product(a_ptr, b_ptr, K, False, BLOCK, BLOCK_K)
    tl.store(c_ptrs, acc.to(tl.float16))


def test_serialized_wgmma_is_reported():
    """One accumulator from either of two pipelined K loops: ptxas makes every wgmma of the kernel wait for the one
    before (its C7515), at the same registers and shared memory. muon's symmetric products ran 4-14% slower so on
    an H100 (bench/results/2026-12-07-h100-owed-38 call1)."""
    a, b, c = (torch.empty(128, 256, dtype=torch.float16), torch.empty(256, 128, dtype=torch.float16),
               torch.empty(128, 128, dtype=torch.float16))
    capture = CompileCapture()
    capture.install()
    try:
        for two in (True, False):  # self_tile 3: a runtime value (1 would be specialized to a constant)
            _one_or_two_k_loops[(1,)](a, b, c, 256, 3, TWO=two, BLOCK=128, BLOCK_K=64, num_warps=4)
    finally:
        capture.uninstall()
    two, one = capture.reports
    assert two["ok"] and one["ok"], (two.get("error"), one.get("error"))
    assert two["wgmma"] and one["wgmma"]
    assert "accumulator registers" in two["wgmma_serialized"]
    assert "wgmma_serialized" not in one


@triton.jit
def _rows_times_rows(a_ptr, b_ptr, c_ptr, K, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    """A[:, :K] B[:, :K]^T, both operands with row stride K."""
    rows = tl.arange(0, BLOCK)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        lhs = tl.load(a_ptr + rows[:, None] * K + (k0 + offs_k)[None, :])
        rhs = tl.load(b_ptr + rows[None, :] * K + (k0 + offs_k)[:, None])
        acc = tl.dot(lhs, rhs, acc)
    tl.store(c_ptr + rows[:, None] * BLOCK + rows[None, :], acc.to(tl.float16))


def test_a_row_stride_not_a_multiple_of_16_loses_the_async_copies():
    """K is the left operand's row stride: 256 is specialized as divisible by 16, so the panels are copied to shared
    memory by cp.async; 250 is not, so the loads go through registers (muon's hidden odd sizes spill so,
    bench/results/2026-12-07-cpu-compile-all)."""
    a, b, c = (torch.empty(128, 256, dtype=torch.float16), torch.empty(128, 256, dtype=torch.float16),
               torch.empty(128, 128, dtype=torch.float16))
    capture = CompileCapture()
    capture.install()
    try:
        for k in (256, 250):
            _rows_times_rows[(1,)](a, b, c, k, BLOCK=128, BLOCK_K=64, num_warps=4)
    finally:
        capture.uninstall()
    aligned, odd = capture.reports
    assert aligned["ok"] and odd["ok"], (aligned.get("error"), odd.get("error"))
    assert aligned["wgmma"] and aligned["cp_async"] and not aligned["tma"]
    assert odd["wgmma"] and not odd["cp_async"]
