"""Bad arguments get one line naming what is wrong and exit 2, before any work and without a traceback."""

import pytest

from d2kbench.cli import main
from d2kbench.suite import TaskFormatError, load_task
from tests.conftest import FIXTURES

TOY = str(FIXTURES / "toy_axpy")
EXPERT = str(FIXTURES / "toy_axpy" / "expert.py")


def usage_error(capsys, *argv) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("d2k: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize("device", ["cuda:999", "gpu", "cuda:x"])
def test_a_device_this_machine_lacks_is_named_with_the_ones_it_has(capsys, device):
    err = usage_error(capsys, "eval", TOY, EXPERT, "--device", device)
    assert f"no device {device!r}" in err and "cpu" in err
    assert f"no device {device!r}" in usage_error(capsys, "suite", "check", "--tasks", "nosuch", "--device", device)


def test_workloads_are_trimmed_and_an_unknown_one_lists_the_task_s_own(capsys):
    err = usage_error(capsys, "eval", TOY, EXPERT, "--device", "cpu", "--workloads", "n200, nosuch")
    assert "'nosuch'" in err and "n200" in err and "n77_f16" in err  # ' n200' was not taken for another name
    assert "names no workload" in usage_error(capsys, "eval", TOY, EXPERT, "--workloads", ",")


def test_a_timeout_must_be_positive(capsys):
    for bad in ("-5", "0", "soon", "inf"):
        with pytest.raises(SystemExit) as exit_:
            main(["eval", TOY, EXPERT, "--timeout", bad])
        assert exit_.value.code == 2 and "positive number of seconds" in capsys.readouterr().err


def test_a_candidate_that_is_a_folder_is_called_one(capsys, tmp_path):
    assert "it is a folder" in usage_error(capsys, "eval", TOY, str(tmp_path), "--device", "cpu")


def test_suite_out_that_is_a_file_is_refused_before_the_check(capsys, tmp_path):
    out = tmp_path / "afile"
    out.write_text("kept")
    assert "--out must be a folder" in usage_error(capsys, "suite", "check", "--tasks", "nosuch", "--out", str(out))
    assert f"{out} is a file" in usage_error(capsys, "suite", "check", "--tasks", "nosuch", "--out", str(out / "sub"))
    assert out.read_text() == "kept"
    assert "names no task" in usage_error(capsys, "suite", "check", "--tasks", ",")


def test_task_files_that_are_not_utf8_name_the_file(toy_copy):
    folder = toy_copy
    for name in ("task.toml", "guidance.md"):
        original = (folder / name).read_bytes()
        (folder / name).write_bytes(original + b"\n# caf\xe9\n")
        with pytest.raises(TaskFormatError, match=rf"{name}: field '<encoding>': expected UTF-8 text"):
            load_task(folder)
        (folder / name).write_bytes(original)
    assert load_task(folder).id == "toy_axpy"


def test_an_infra_verdict_exits_three_not_as_a_failed_candidate(capsys, toy_copy):
    """A harness fault (here the task's own reference does not import) is no verdict on the candidate: exit 3."""
    folder = toy_copy
    (folder / "reference.py").write_text((folder / "reference.py").read_text() + "\nraise RuntimeError('broken')\n")
    assert main(["eval", str(folder), EXPERT, "--device", "cpu", "--json"]) == 3
    assert '"verdict": "infra"' in capsys.readouterr().out
