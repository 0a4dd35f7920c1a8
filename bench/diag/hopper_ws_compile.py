"""Which GEMM forms Triton's Hopper warp specialization takes, compiled for sm_90 (no GPU needed).

    PYTHONPATH=src python3 bench/diag/hopper_ws_compile.py          # this machine's Triton
    PYTHONPATH=.venv/device-triton:src python3 bench/diag/hopper_ws_compile.py   # the H200's (3.6)

Each form is a persistent loop over 128-row output tiles marked `warp_specialize=True`; the table says whether the
compile succeeded, whether the pass applied (`setmaxnreg` in the PTX), whether TMA is used, and the registers and
spills ptxas reports: the evidence behind docs/perf/optimizer.md's v6 notes (which form the muon expert's TMA
kernel takes, and why).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from d2kbench.evaluate.sm90 import ptx_features, ptxas_info


@triton.jit
def host_descriptors(a_desc, b_desc, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     B_TRANSPOSED: tl.constexpr):
    """Descriptors made on the host; B_TRANSPOSED: B given as [N, K] rows, its tile transposed for the dot (the
    textbook TMA GEMM's layout)."""
    num_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BM) * num_n, 132, warp_specialize=True):
        pm, pn = tile // num_n, tile % num_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BK)):
            if B_TRANSPOSED:
                b = b_desc.load([pn * BN, ki * BK]).T
            else:
                b = b_desc.load([ki * BK, pn * BN])
            acc = tl.dot(a_desc.load([pm * BM, ki * BK]), b, acc)
        offs_m, offs_n = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN)
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16))


@triton.jit
def kernel_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    num_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BM) * num_n, 132, warp_specialize=True):
        pm, pn = tile // num_n, tile % num_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([pm * BM, ki * BK]), b_desc.load([ki * BK, pn * BN]), acc)
        offs_m, offs_n = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN)
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16))


@triton.jit
def kernel_descriptors_3d(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[2, M, K], strides=[M * K, K, 1], block_shape=[1, BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[2, K, N], strides=[K * N, N, 1], block_shape=[1, BK, BN])
    num_n = tl.cdiv(N, BN)
    per = tl.cdiv(M, BM) * num_n
    for tile in tl.range(tl.program_id(0), 2 * per, 132, warp_specialize=True):
        b, t = tile // per, tile % per
        pm, pn = t // num_n, t % num_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([b, pm * BM, ki * BK]).reshape(BM, BK),
                         b_desc.load([b, ki * BK, pn * BN]).reshape(BK, BN), acc)
        offs_m, offs_n = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN)
        tl.store(c_ptr + b * M * N + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16))


@triton.jit
def symmetric_pointer_stores(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Upper tiles of a symmetric product (M = N) as the expert's epilogue has them: the D term (here C itself)
    added, the tile and its transpose stored through pointer stores masked on the bounds and the diagonal."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    num_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BM) * num_n, 132, warp_specialize=True):
        pm, pn = tile // num_n, tile % num_n
        if pn * BN + BN > pm * BM:
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for ki in range(tl.cdiv(K, BK)):
                acc = tl.dot(a_desc.load([pm * BM, ki * BK]), b_desc.load([ki * BK, pn * BN]), acc)
            offs_m, offs_n = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN)
            inside = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            d = tl.load(c_ptr + offs_m[:, None] * N + offs_n[None, :], mask=inside, other=0.0)
            out = (acc + d.to(tl.float32)).to(tl.bfloat16)
            tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], out,
                     mask=inside & (offs_n[None, :] >= offs_m[:, None]))
            tl.store(c_ptr + offs_n[:, None] * N + offs_m[None, :], tl.trans(out),
                     mask=(offs_n[:, None] < N) & (offs_m[None, :] < M) & (offs_n[:, None] > offs_m[None, :]))


@triton.jit
def symmetric_descriptor_stores(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                                BK: tl.constexpr):
    """The same with square tiles (BN = BM), the D term loaded and the tile and its transpose stored through
    descriptors (which clip at the bounds)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    num_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BM) * num_n, 132, warp_specialize=True):
        pm, pn = tile // num_n, tile % num_n
        if pn >= pm:
            acc = c_desc.load([pm * BM, pn * BN]).to(tl.float32)
            for ki in range(tl.cdiv(K, BK)):
                acc = tl.dot(a_desc.load([pm * BM, ki * BK]), b_desc.load([ki * BK, pn * BN]), acc)
            out = acc.to(tl.bfloat16)
            c_desc.store([pm * BM, pn * BN], out)
            if pn > pm:
                c_desc.store([pn * BN, pm * BM], tl.trans(out))


POINTERS = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16"}


def host(b_block: str, transposed: bool) -> dict:
    """host_descriptors' argument types and its B_TRANSPOSED."""
    return {"a_desc": "tensordesc<bf16[128, 64]>", "b_desc": f"tensordesc<bf16[{b_block}]>", "c_ptr": "*bf16",
            "B_TRANSPOSED": transposed}


FORMS = [  # (kernel, argument types (a bool: a constexpr's value), tile N, warps)
    (host_descriptors, host("256, 64", True), 256, 4),
    (host_descriptors, host("64, 256", False), 256, 4),
    (host_descriptors, host("64, 256", False), 256, 8),
    (kernel_descriptors, POINTERS, 256, 4),
    (kernel_descriptors, POINTERS, 256, 8),
    (kernel_descriptors_3d, POINTERS, 256, 4),
    (symmetric_pointer_stores, POINTERS, 256, 4),
    (symmetric_pointer_stores, POINTERS, 128, 4),
    (symmetric_descriptor_stores, POINTERS, 128, 4),
]


def main() -> None:
    print(f"triton {triton.__version__}, sm_90, 128-row tiles, K step 64, three stages")
    for fn, args, block_n, warps in FORMS:
        flags = {name: value for name, value in args.items() if isinstance(value, bool)}
        signature = {**args, **dict.fromkeys(flags, "constexpr"), "M": "i32", "N": "i32", "K": "i32",
                     "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
        label = f"{fn.__name__}{''.join(f' {n}={v}' for n, v in flags.items())} 128x{block_n}, {warps} warps"
        try:
            compiled = triton.compile(ASTSource(fn=fn, signature=signature,
                                                constexprs={"BM": 128, "BN": block_n, "BK": 64, **flags}),
                                      target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": 3})
        except Exception as exc:  # noqa: BLE001 - a failed compile is a finding
            print(f"{label}: compile failed ({type(exc).__name__})")
            continue
        ptx = compiled.asm["ptx"]
        info, features = ptxas_info(ptx), ptx_features(ptx)
        print(f"{label}: warp-specialized={features['warp_specialized']}, TMA={features['tma']}, "
              f"registers={info.get('registers')}, spill stores={info.get('spill_store_bytes')} B")


if __name__ == "__main__":
    main()
