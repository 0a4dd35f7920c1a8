"""A sandboxed candidate's compiled kernels, kept per source: only its own plain files travel."""

import os
from pathlib import Path

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


def test_a_kernel_kept_from_one_folder_is_a_cache_hit_in_another(tmp_path, store, monkeypatch):
    """Triton records a compiled kernel's files by absolute path in a group file, and a group whose files are not
    all there is a miss. Each evaluation's candidate has a folder of its own, so without rebasing the kept cache
    never hit: muon's kernels compiled again in every evaluation (9.2 s, bench/results/2026-12-04-h200-owed-11)."""
    from triton.runtime.cache import FileCacheManager

    def group_in(folder):
        monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
        return FileCacheManager("KEY")

    first = tmp_path / "eval1" / "triton"
    manager = group_in(first)
    paths = {name: manager.put(data, name) for name, data in (("k.cubin", b"\x7fELF"), ("k.json", "{}"))}
    manager.put_group("k.json", paths)
    assert manager.get_group("k.json") == paths  # a hit where it was compiled
    assert candidate_cache.save(store, first, uid=None) == 3

    second = tmp_path / "eval2" / "triton"
    assert candidate_cache.restore(store, second, uid=None) == 3
    found = group_in(second).get_group("k.json")
    assert found == {name: str(second / "KEY" / name) for name in paths}  # a hit, on the restored files
    assert (second / "KEY" / "k.cubin").read_bytes() == b"\x7fELF"


@pytest.mark.parametrize("child", ["/etc/passwd", "{old}/../../outside.cubin"])
def test_a_group_naming_files_outside_its_cache_reads_as_a_miss(tmp_path, store, child):
    """A candidate controls what its group files say: one that points outside its own cache folder is kept as a
    group of nothing (Triton compiles again), never rebased onto a file elsewhere."""
    import json

    cache = tmp_path / "home" / "triton"
    (cache / "KEY").mkdir(parents=True)
    (cache / "KEY" / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": child.format(old=cache)}}))
    candidate_cache.save(store, cache, uid=None)
    dest = tmp_path / "next" / "triton"
    candidate_cache.restore(store, dest, uid=None)
    assert json.loads((dest / "KEY" / "__grp__k.json").read_text()) == {"child_paths": None}


def test_a_later_evaluation_adds_its_kernels_and_leaves_the_kept_ones(tmp_path, store):
    """The first evaluation of a file may compile only some kernels (the agent's run_tests on the visible
    workloads); the final evaluation's others (the hidden workloads') are added beside them."""
    first = tmp_path / "eval1" / "triton"
    (first / "aa").mkdir(parents=True)
    (first / "aa" / "k.cubin").write_bytes(b"first")
    assert candidate_cache.save(store, first, uid=None) == 1

    second = tmp_path / "eval2" / "triton"
    assert candidate_cache.restore(store, second, uid=None) == 1
    (second / "aa" / "k.cubin").write_bytes(b"rewritten by the candidate")  # kept already: not replaced
    (second / "bb").mkdir()
    (second / "bb" / "other.cubin").write_bytes(b"second")
    assert candidate_cache.save(store, second, uid=None) == 1

    third = tmp_path / "eval3" / "triton"
    assert candidate_cache.restore(store, third, uid=None) == 2
    assert (third / "aa" / "k.cubin").read_bytes() == b"first"
    assert (third / "bb" / "other.cubin").read_bytes() == b"second"
    assert not [p for p in third.rglob("*") if p.name.startswith(".")]  # no partial file of a save travels


def test_compile_reports_keep_and_reuse_the_candidates_cache(toy_task, tmp_path, monkeypatch):
    """The sm_90 compile report compiles (it is not the interpreter): what it compiles is kept for the file, and
    a GPU evaluation of the same file, or the next report, loads it instead of compiling again.

    The reports alone can't tell reuse from a fresh compile (both give the same report), so the sandbox's calls
    into this module are watched: the second report must get the kept files copied into its folder, and Triton
    must leave them as they were (a miss compiles again and replaces them, os.replace: new inodes) and add none."""
    from d2kbench.evaluate.evaluator import compile_report

    monkeypatch.setenv("D2K_TRITON_CACHE", str(tmp_path / "kept"))
    real_restore, real_save = candidate_cache.restore, candidate_cache.save
    restored: list[tuple[int, dict]] = []  # per report: files restored, and the cache folder just after
    before_save: list[dict] = []  # per report: the cache folder as the candidate left it

    def files(folder):
        return {str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
                for p in Path(folder).rglob("*") if p.is_file()} if Path(folder).is_dir() else {}

    def restore(source, dest, uid):
        count = real_restore(source, dest, uid)
        restored.append((count, files(dest)))
        return count

    def save(source, cache, uid):
        before_save.append(files(cache))
        return real_save(source, cache, uid)

    monkeypatch.setattr(candidate_cache, "restore", restore)
    monkeypatch.setattr(candidate_cache, "save", save)

    first = compile_report(toy_task, toy_task.expert_path)
    kept = tmp_path / "kept" / "candidates" / candidate_cache.source_key(toy_task.expert_path)
    assert any(p.suffix == ".cubin" for p in kept.rglob("*")), "nothing of the compile was kept"
    assert restored[0][0] == 0, "the first report found a kept cache before anything was kept"
    assert any(name.endswith(".cubin") for name in before_save[0]), "the first report did not compile"

    assert compile_report(toy_task, toy_task.expert_path) == first
    assert len(restored) == len(before_save) == 2, "the second report did not go through the kept cache"
    count, after_restore = restored[1]
    assert count == len([p for p in kept.rglob("*") if p.is_file()]) > 0, "the kept cache was not restored"
    assert any(name.endswith(".cubin") for name in after_restore)
    assert before_save[1] == after_restore, "the second report compiled again instead of loading the kept cache"
