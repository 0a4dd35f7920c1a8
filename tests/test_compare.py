"""The parent's comparison rules."""

import dataclasses

import pytest
import torch

from d2kbench.evaluate.compare import compare_output, output_error
from d2kbench.suite import OutputSpec

BASE = OutputSpec(name="o", dtype="float32", shape="", compare="allclose", atol={"*": 1e-3}, rtol={"*": 1e-3},
                  scale_by_rms=False, max_code_step=0, max_step_frac=0.0, match_strides=False)


def spec(**kw):
    return dataclasses.replace(BASE, **kw)


def test_allclose_accepts_within_and_rejects_outside():
    e = torch.randn(100)
    assert compare_output(spec(), e + 5e-4, e, "float32") is None
    bad = e.clone()
    bad[17] += 0.1
    m = compare_output(spec(), bad, e, "float32")
    assert m.reason == "mismatch" and "(17,)" in m.detail


def test_nonfinite_passes_only_where_oracle_matches():
    e = torch.tensor([float("-inf"), 1.0, 2.0])
    assert compare_output(spec(), e.clone(), e, "float32") is None
    got = e.clone()
    got[0] = float("inf")
    assert compare_output(spec(), got, e, "float32").reason == "mismatch"
    got = e.clone()
    got[1] = float("nan")
    assert compare_output(spec(), got, e, "float32").reason == "nan"


def test_rms_scaled_tolerance_follows_output_magnitude():
    e = torch.randn(1000) * 1e-3
    got = e + 5e-5
    # rms(e) ~ 1e-3: a relative atol of 0.1 allows ~1e-4, one of 0.01 only ~1e-5
    assert compare_output(spec(atol={"*": 0.1}, rtol={"*": 0}, scale_by_rms=True), got, e, "float32") is None
    tight = spec(atol={"*": 0.01}, rtol={"*": 0}, scale_by_rms=True)
    assert compare_output(tight, got, e, "float32").reason == "mismatch"


def test_fp8_codes_one_step_on_few_elements():
    s = spec(dtype="float8_e4m3fn", compare="fp8", max_code_step=1, max_step_frac=0.01)
    e = (torch.randn(1000) * 50).to(torch.float8_e4m3fn)
    g = e.clone()
    raw = g.view(torch.uint8)
    raw[:5] = raw[:5] + 1  # one code step on 0.5% of elements
    assert compare_output(s, g, e, "bfloat16") is None
    raw[:50] = e.view(torch.uint8)[:50] + 1  # 5%: too many
    assert compare_output(s, g, e, "bfloat16").reason == "mismatch"
    g = e.clone()
    g.view(torch.uint8)[7] = e.view(torch.uint8)[7] + 3  # three steps
    assert "more than 1 step" in compare_output(s, g, e, "bfloat16").detail


def test_shape_dtype_and_strides():
    e = torch.randn(4, 6)
    assert compare_output(spec(), torch.randn(6, 4), e, "float32").reason == "shape"
    assert compare_output(spec(), e.half(), e, "float32").reason == "dtype"
    col_major = e.t().contiguous().t()
    m = compare_output(spec(match_strides=True), e, col_major, "float32", [6, 1], [1, 4])
    assert m.reason == "strides"


def test_exact():
    e = torch.arange(10, dtype=torch.int32)
    assert compare_output(spec(dtype="int32", compare="exact"), e.clone(), e, "float32") is None
    g = e.clone()
    g[3] = 0
    assert compare_output(spec(dtype="int32", compare="exact"), g, e, "float32").reason == "mismatch"


def test_output_error_is_relative_rms_for_allclose_and_code_share_for_fp8():
    expected = torch.tensor([3.0, 4.0, float("inf")], dtype=torch.float64)
    got = torch.tensor([3.0, 4.5, float("inf")], dtype=torch.float32)
    assert output_error(spec(), got, expected) == pytest.approx(0.5 / 5.0)
    codes = torch.tensor([1.0, 2.0, 4.0, 8.0]).to(torch.float8_e4m3fn)
    off = torch.tensor([1.0, 2.0, 4.5, 8.0]).to(torch.float8_e4m3fn)
    assert output_error(spec(compare="fp8"), off, codes) == pytest.approx(0.25)
    assert output_error(spec(compare="exact"), got, expected) is None


def test_a_custom_check_runs_on_one_cpu_thread_and_the_count_comes_back(monkeypatch):
    """moe's check (a custom comparison) runs in the parent beside busy workers, where a team of one thread per core
    is slowed by any busy core (its parent compare 20x slower on the H200 beside starting workers:
    bench/results/2026-12-04-h200-owed-19 call6). The evaluation's checks run on one thread, and the caller's
    thread count comes back."""
    from d2kbench.evaluate.evaluator import EvalOptions, evaluate
    from d2kbench.evaluate.taskcode import reference_module
    from d2kbench.suite import find_task

    task = find_task("moe_align_block_size")
    reference = reference_module(task)
    seen = []

    def recording_check(outputs, expected, inputs):
        seen.append(torch.get_num_threads())
        return reference_check(outputs, expected, inputs)

    reference_check = reference.check
    monkeypatch.setattr(reference, "check", recording_check)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = evaluate(task, task.expert_path, EvalOptions(device="cpu", workloads=[task.split("cpu")[0].name]))
        assert result.verdict == "pass", result.detail
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
