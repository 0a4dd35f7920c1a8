"""The leak checker itself catches identifiers, tuning values and code fences."""

from tests.conftest import FIXTURES
from tests.guidance_leaks import expert_identifiers, leaks, tuning_values


def test_leak_checker_finds_planted_leaks(tmp_path):
    import shutil

    from d2kbench.suite import load_task

    dst = tmp_path / "toy_axpy"
    shutil.copytree(FIXTURES / "toy_axpy", dst)
    assert leaks(load_task(dst)) == []
    guidance = dst / "guidance.md"
    guidance.write_text(guidance.read_text() + "\nUse axpy_kernel with 64 lanes.\n\n```\ncode\n```\n")
    found = leaks(load_task(dst))
    assert "identifier axpy_kernel" in found
    assert "tuning value 64" in found
    assert "a code fence" in found


def test_identifiers_and_tuning_values():
    src = "BLOCK_N = 32\ndef my_kernel(x_ptr, BLOCK: int):\n    k[g](x, BLOCK=64, num_warps=8)\n"
    assert {"BLOCK_N", "my_kernel", "x_ptr", "BLOCK", "num_warps"} <= expert_identifiers(src)
    assert tuning_values(src) == {32, 64, 8}
