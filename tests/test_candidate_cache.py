"""A sandboxed candidate's compiled kernels, kept per source: only its own plain files travel."""

import os

import pytest

from d2kbench.evaluate import candidate_cache


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("D2K_TRITON_CACHE", str(tmp_path / "store"))
    source = tmp_path / "solution.py"
    source.write_text("def run(x):\n    return x\n")
    return source


def test_a_saved_cache_comes_back_for_the_same_source_only(tmp_path, store):
    cache = tmp_path / "home1" / "triton"
    (cache / "ab12").mkdir(parents=True)
    (cache / "ab12" / "kernel.cubin").write_bytes(b"\x7fELF compiled")
    (cache / "ab12" / "kernel.json").write_text("{}")
    assert candidate_cache.save(store, cache, uid=None) == 2
    assert candidate_cache.save(store, cache, uid=None) == 0  # kept once

    dest = tmp_path / "home2" / "triton"
    assert candidate_cache.restore(store, dest, uid=None) == 2
    assert (dest / "ab12" / "kernel.cubin").read_bytes() == b"\x7fELF compiled"

    store.write_text("def run(x):\n    return x + 0\n")  # another source: nothing to restore
    assert candidate_cache.restore(store, tmp_path / "home3" / "triton", uid=None) == 0


def test_links_are_never_followed_or_kept(tmp_path, store):
    secret = tmp_path / "expert.py"
    secret.write_text("the expert's source")
    cache = tmp_path / "home" / "triton"
    cache.mkdir(parents=True)
    (cache / "own.cubin").write_bytes(b"own")
    os.symlink(secret, cache / "leak_by_symlink")
    os.link(secret, cache / "leak_by_hardlink")
    assert candidate_cache.save(store, cache, uid=None) == 1
    dest = tmp_path / "next" / "triton"
    candidate_cache.restore(store, dest, uid=None)
    assert sorted(p.name for p in dest.iterdir()) == ["own.cubin"]


def test_files_of_another_owner_are_not_kept(tmp_path, store):
    cache = tmp_path / "home" / "triton"
    cache.mkdir(parents=True)
    (cache / "kernel.cubin").write_bytes(b"x")
    assert candidate_cache.save(store, cache, uid=os.getuid() + 12345) == 0
