"""The tensor files of the private channel: round trips, mapped reads, size checks."""

import os
import subprocess
import sys

import pytest
import torch

from d2kbench.evaluate import channel


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int32, torch.uint8, torch.bool])
def test_round_trip_keeps_bytes_shape_and_consumes_the_file(tmp_path, dtype, mapped):
    value = (torch.randn(37, 5) * 100).to(dtype).t()  # non-contiguous: travels contiguous
    desc = channel.pack_value(value, tmp_path)
    back = channel.unpack_value(desc, tmp_path, mapped=mapped)
    assert back.dtype == dtype and back.shape == value.shape and back.is_contiguous()
    assert torch.equal(back, value)
    assert desc["strides"] == list(value.stride())
    assert not any(tmp_path.iterdir())


def test_mapped_tensor_is_private_and_outlives_its_file(tmp_path):
    value = torch.arange(1000, dtype=torch.float32)
    # private: with the file kept, a write to the tensor stays in this process's copy-on-write pages
    desc = channel.pack_value(value, tmp_path)
    path = tmp_path / desc["tensor"]
    written = path.read_bytes()
    back = channel.unpack_value(desc, tmp_path, mapped=True, consume=False)
    assert path.exists()
    back.add_(1)
    assert torch.equal(back, value + 1)
    assert path.read_bytes() == written, "a write to the mapped tensor reached its file"
    assert torch.equal(channel.unpack_value(desc, tmp_path), value)  # the file still reads as written

    # outlives its file: consumed, the file is gone, and the mapping still reads (and takes writes) right
    desc = channel.pack_value(value, tmp_path)
    back = channel.unpack_value(desc, tmp_path, mapped=True)
    assert not (tmp_path / desc["tensor"]).exists()
    assert not any(tmp_path.iterdir())
    assert torch.equal(back, value)
    back.add_(1)
    assert float(back.sum()) == sum(range(1, 1001))


def test_empty_and_scalar_values(tmp_path):
    empty = channel.unpack_value(channel.pack_value(torch.empty(0, 4), tmp_path), tmp_path, mapped=True)
    assert empty.shape == (0, 4)
    assert channel.unpack_value(channel.pack_value(2.5, tmp_path), tmp_path) == 2.5


def test_a_file_of_the_wrong_size_is_refused(tmp_path):
    desc = channel.pack_value(torch.ones(10), tmp_path)
    (tmp_path / desc["tensor"]).write_bytes(b"\0" * 12)
    with pytest.raises(channel.ProtocolError, match="holds 12 bytes, expected 40"):
        channel.unpack_value(desc, tmp_path)


def test_a_linked_value_shares_the_file_read_only_and_reads_back_equal(tmp_path):
    (tmp_path / "trusted").mkdir()
    (tmp_path / "cand").mkdir()
    value = torch.randn(5, 7)
    desc = channel.pack_value(value, tmp_path / "trusted")
    source = tmp_path / "trusted" / desc["tensor"]
    mapped = channel.unpack_value(desc, tmp_path / "trusted", mapped=True, consume=False)
    linked = channel.link_value(mapped, source, tmp_path / "cand")
    target = tmp_path / "cand" / linked["tensor"]
    assert target.stat().st_ino == source.stat().st_ino and oct(source.stat().st_mode & 0o777) == "0o444"
    assert {k: v for k, v in linked.items() if k != "tensor"} == {k: v for k, v in desc.items() if k != "tensor"}
    assert torch.equal(channel.unpack_value(linked, tmp_path / "cand"), value)
    assert not target.exists() and source.exists()  # the reader consumed its link, not the file
    assert channel.link_value(mapped, tmp_path / "trusted" / "gone.bin", tmp_path / "cand") is None


def test_a_private_folder_sweeps_what_dead_processes_left(tmp_path):
    """A process killed by SIGKILL cleans nothing up: the next folder of the same kind removes its leftovers,
    never a live process's, nor one of another pid namespace (where the pid means another process)."""
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    here = channel.pid_namespace()
    left = tmp_path / f"d2k-spool-{dead}.{here}-abc"
    (left / "worker").mkdir(parents=True)
    kept = [tmp_path / f"d2k-spool-{os.getpid()}.{here}-def", tmp_path / f"d2k-spool-{dead}.1{here}-ghi",
            tmp_path / f"d2k-eval-{dead}.{here}-jkl"]  # alive; another namespace; another kind
    for folder in kept:
        folder.mkdir()
    made = channel.private_folder("d2k-spool-", tmp_path)
    assert made.is_dir() and made.name.startswith(f"d2k-spool-{os.getpid()}.{here}-")
    assert not left.exists() and all(folder.exists() for folder in kept)
