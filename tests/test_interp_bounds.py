"""The interpreter's bounds check (`interp_bounds`): which accesses it stops, which it lets through, what it says."""

from tests.test_expert_knobs import interpreted

CHECKS = """
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor
from d2kbench.evaluate import interp_bounds

assert interp_bounds.install() and interp_bounds.install()  # twice: wrapped once


@triton.jit
def shifted_copy(src_ptr, dst_ptr, n, SHIFT: tl.constexpr, STORE_SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs + SHIFT, mask=offs < n)
    tl.store(dst_ptr + offs + STORE_SHIFT, x, mask=offs < n)


@triton.jit
def count_into(counts_ptr, index_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(counts_ptr + tl.load(index_ptr + offs, mask=offs < n), 1, mask=offs < n)


@triton.jit
def tile_copy(src_desc, dst_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, BLOCK: tl.constexpr):
    tile = src_desc.load([0, 0])  # a tile larger than the tensor: the descriptor's bounds mask the rest
    offs = tl.arange(0, BLOCK)
    mask = (offs[:, None] < ROWS) & (offs[None, :] < COLS)
    tl.store(dst_ptr + offs[:, None] * COLS + offs[None, :], tile, mask=mask)


def stopped(launch):
    try:
        launch()
    except Exception as exc:  # the interpreter wraps the check's error in its own
        assert "OutOfBoundsAccess" in repr(exc), repr(exc)
        found = interp_bounds.take()
        assert len(found) == 1 and found[0] in repr(exc), (found, repr(exc))
        assert interp_bounds.take() == []  # taken once
        return found[0]
    raise AssertionError("not stopped")


x, y = torch.randn(64), torch.empty(64)
shifted_copy[(1,)](x, y, 64, SHIFT=0, STORE_SHIFT=0, BLOCK=64)
assert torch.equal(x, y) and interp_bounds.take() == []
# masked off past the end: nothing happens there, nothing to stop
shifted_copy[(1,)](x, y, 40, SHIFT=24, STORE_SHIFT=0, BLOCK=64)
assert torch.equal(y[:40], x[24:]) and interp_bounds.take() == []
# a view given, its storage read beyond the view (a transposed or offset read of the same buffer): allowed
shifted_copy[(1,)](x[:8], y, 64, SHIFT=0, STORE_SHIFT=0, BLOCK=64)
assert interp_bounds.take() == []
print(stopped(lambda: shifted_copy[(1,)](x, y, 64, SHIFT=8, STORE_SHIFT=0, BLOCK=64)))
print(stopped(lambda: shifted_copy[(1,)](x, y, 64, SHIFT=0, STORE_SHIFT=-3, BLOCK=64)))
counts = torch.zeros(8, dtype=torch.int32)
count_into[(1,)](counts, torch.arange(8, dtype=torch.int32), 8, BLOCK=8)
assert counts.tolist() == [1] * 8 and interp_bounds.take() == []
print(stopped(lambda: count_into[(1,)](counts, torch.tensor([0, 9], dtype=torch.int32), 2, BLOCK=8)))
a, out = torch.randn(6, 4), torch.empty(6, 4)
tile_copy[(1,)](TensorDescriptor.from_tensor(a, [8, 8]), out, ROWS=6, COLS=4, BLOCK=8)
assert torch.equal(a, out) and interp_bounds.take() == []
wrong = TensorDescriptor(a, [8, 4], [4, 1], [8, 8])  # two rows more than the tensor has
print(stopped(lambda: tile_copy[(1,)](wrong, out, ROWS=6, COLS=4, BLOCK=8)))
"""


def test_the_bounds_check_stops_stray_accesses_and_only_those():
    """Loads, stores, atomics and TMA descriptor loads of interpreted launches: in bounds (masked, through a view
    of a larger storage, a descriptor's partial tile) they run; one element outside stops the launch, recorded once,
    its line naming the kernel, the operation, the element count and the argument it strayed from."""
    done = interpreted(CHECKS)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines == [
        "shifted_copy, program (0, 0, 0): a load of 8 of its 64 active elements outside every tensor the launch was "
        "given (the first, 0 bytes past the end of `src_ptr`)",
        "shifted_copy, program (0, 0, 0): a store of 3 of its 64 active elements outside every tensor the launch was "
        "given (the first, 12 bytes before `dst_ptr`)",
        "count_into, program (0, 0, 0): an atomic of 1 of its 2 active elements outside every tensor the launch was "
        "given (the first, 4 bytes past the end of `counts_ptr`)",
        "tile_copy, program (0, 0, 0): a load of 8 of its 32 active elements outside every tensor the launch was "
        "given (the first, 0 bytes past the end of `src_desc.base`)",
    ], done.stdout
