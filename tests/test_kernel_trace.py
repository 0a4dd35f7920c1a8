"""The kernel list of a traced call (the trace itself needs a GPU: bench/gpu_integrity.py): which
kernels are foreign and when a call used several streams; the launch counter's kernel names."""

import os
import subprocess
import sys

from d2kbench.evaluate.integrity import kernel_findings

OWN = {"_attn_split_kernel", "_merge_kernel"}


def kernel(name: str, stream: int = 7) -> dict:
    return {"name": name, "stream": stream}


def test_own_triton_kernels_and_torch_housekeeping_are_not_foreign():
    kernels = [kernel("_attn_split_kernel"), kernel("_merge_kernel"),
               kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"),
               kernel("Memset (Device)"), kernel("Memcpy DtoD (Device -> Device)")]
    assert kernel_findings(kernels, OWN) == {"foreign": [], "streams": [], "ops": []}


def test_torch_arithmetic_behind_the_guards_back_is_foreign():
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    assert kernel_findings([kernel("_merge_kernel"), kernel(add)], OWN)["foreign"] == [add]


def test_vendor_kernels_are_foreign_whatever_the_candidate_calls_its_own():
    kernels = [kernel("_attn_split_kernel"), kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
               kernel("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTT"), kernel("cutlass_gemm")]
    found = kernel_findings(kernels, OWN)
    assert found["foreign"] == ["cutlass_gemm", "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTT",
                                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"]
    assert kernel_findings([kernel("cutlass_gemm")], {"cutlass_gemm"})["foreign"] == []


def test_aten_ops_outside_the_allowlist_are_reported_even_without_the_guard():
    ops = [{"name": "aten::empty_like", "op": True}, {"name": "aten::fill_", "op": True},
           {"name": "aten::add", "op": True}, {"name": "aten::mm", "op": True}]
    assert kernel_findings([kernel("_merge_kernel"), *ops], OWN)["ops"] == ["add", "mm"]


def test_several_streams_are_reported_one_is_not():
    assert kernel_findings([kernel("_merge_kernel", 7), kernel("_attn_split_kernel", 7)], OWN)["streams"] == []
    two = [kernel("_merge_kernel", 7), kernel("_attn_split_kernel", 13)]
    assert kernel_findings(two, OWN)["streams"] == ["13", "7"]


def test_the_launch_counter_records_the_launched_kernels_names(tmp_path):
    """In a fresh interpreter process (the counter patches Triton's classes)."""
    script = (
        "import torch\n"
        "from d2kbench.evaluate import integrity\n"
        "from d2kbench.evaluate.worker import load_module\n"
        "launches = integrity.TritonLaunches()\n"
        "launches.install()\n"
        "expert = load_module(__import__('pathlib').Path('tests/fixtures/toy_axpy/expert.py'), 'toy_expert')\n"
        "expert.run(torch.randn(100), torch.randn(100), 0.5)\n"
        "print(launches.count, sorted(launches.names))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": "src"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    count, names = out.stdout.strip().split(" ", 1)
    assert int(count) >= 1 and names == "['axpy_kernel']"


def test_the_launch_counter_times_kernel_compiles(tmp_path):
    """What a request spends compiling kernels or loading them from the cache is counted (the worker reports it
    as the stage `compile`); Triton's compile step stood in for by a 50 ms sleep, in a fresh process."""
    script = (
        "import time\n"
        "from triton.runtime import jit\n"
        "from d2kbench.evaluate import integrity\n"
        "stand_in = lambda self, *a, **k: time.sleep(0.05) or 'kernel'\n"
        "jit.JITFunction._do_compile = stand_in\n"
        "launches = integrity.TritonLaunches()\n"
        "launches.install()\n"
        "assert jit.JITFunction._do_compile(None, 'key') == 'kernel'\n"
        "launches.uninstall()\n"
        "print(round(launches.compile_s, 3), jit.JITFunction._do_compile is stand_in)\n"
    )
    env = {**os.environ, "PYTHONPATH": "src"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    seconds, restored = out.stdout.split()
    assert 0.05 <= float(seconds) < 1.0 and restored == "True"
