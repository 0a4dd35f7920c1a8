"""The workers' bytecode cache: the warm-up fills it with library and harness bytecode only, workers load from it,
and a confined candidate can read it but not plant anything in it."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from d2kbench.evaluate import bytecode
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation, evaluate, worker_env
from tests.conftest import PLANTED, ROOT


@pytest.fixture(scope="module")
def warm_cache():
    """A cache folder filled by the warm-up process, as `bytecode.start_warmup` starts it (waited for here)."""
    folder = Path(tempfile.mkdtemp(prefix="d2k-bytecode-test-"))  # under /tmp: a candidate's uid can walk in
    folder.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = bytecode.start_warmup(folder, env)
    assert proc is not None and proc.wait(timeout=300) == 0
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_the_warm_up_caches_the_workers_imports_and_no_task_code(warm_cache):
    assert bytecode.ready(warm_cache)
    assert bytecode.marker(warm_cache).read_text() == bytecode.versions()
    pycs = [p for p in warm_cache.rglob("*.pyc")]
    torch_init = [p for p in pycs if p.parent.name == "torch" and p.name.startswith("__init__.")]
    assert torch_init, "no bytecode of torch"
    assert any("_dynamo" in p.parts for p in pycs), "the op guard's first op imports torch._dynamo: not cached"
    ours = [p for p in pycs if "d2kbench" in p.parts]
    assert any(p.name.startswith("worker.") for p in ours)
    for p in ours:  # only what a candidate may read anyway: the package's __init__ and evaluate/
        inside = p.parts[p.parts.index("d2kbench") + 1:]
        assert len(inside) == 1 or inside[0] == "evaluate", f"bytecode of {p} is not the workers' code"


def test_a_worker_started_with_the_prefix_loads_torch_from_it(warm_cache):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONPYCACHEPREFIX": str(warm_cache),
           "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-v", "-c", "import torch"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = [line for line in proc.stderr.splitlines() if line.startswith("# code object from")]
    torch_init = [line for line in loaded if "/torch/__init__." in line]
    assert torch_init and str(warm_cache) in torch_init[0], torch_init


def test_workers_get_the_prefix_only_once_the_cache_is_warm_and_the_evaluators_own(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(bytecode, "start_warmup", lambda folder, env: started.append(folder))
    monkeypatch.setattr(bytecode, "_started", set())
    folder = tmp_path / "cache"
    monkeypatch.setenv("D2K_BYTECODE_CACHE", str(folder))
    assert "PYTHONPYCACHEPREFIX" not in worker_env("cpu", tmp_path)
    assert "PYTHONPYCACHEPREFIX" not in worker_env("cpu", tmp_path)
    assert started == [folder]  # the warm-up started once, workers go without meanwhile
    folder.mkdir(mode=0o755)
    bytecode.marker(folder).write_text(bytecode.versions())
    assert worker_env("cpu", tmp_path)["PYTHONPYCACHEPREFIX"] == str(folder)
    bytecode.marker(folder).write_text("another Python")  # a marker that does not name these versions: not used
    assert "PYTHONPYCACHEPREFIX" not in worker_env("cpu", tmp_path)
    bytecode.marker(folder).write_text(bytecode.versions())
    folder.chmod(0o775)  # writable by others: anyone might have planted bytecode in it
    assert "PYTHONPYCACHEPREFIX" not in worker_env("cpu", tmp_path)
    folder.chmod(0o755)
    assert worker_env("cpu", tmp_path)["PYTHONPYCACHEPREFIX"] == str(folder)  # warm and ours again: used

    # owned by another uid (its mode as before, no one else may write): whoever owns it may have planted bytecode
    if os.geteuid() != 0:
        pytest.skip("giving the cache folder to another uid (the ownership check) needs root to chown it")
    info = folder.stat()
    other = 65534 if os.getuid() != 65534 else 65533
    os.chown(folder, other, -1)
    try:
        assert folder.stat().st_uid == other and folder.stat().st_mode == info.st_mode
        assert "PYTHONPYCACHEPREFIX" not in worker_env("cpu", tmp_path)
    finally:
        os.chown(folder, info.st_uid, info.st_gid)
    assert worker_env("cpu", tmp_path)["PYTHONPYCACHEPREFIX"] == str(folder)


def test_a_confined_candidate_reads_the_cache_but_cannot_plant_bytecode(toy_task, warm_cache, monkeypatch):
    monkeypatch.setenv("D2K_BYTECODE_CACHE", str(warm_cache))
    result = evaluate(toy_task, PLANTED / "sandbox_writes_bytecode.py",
                      EvalOptions(device="cpu", call_timeout_s=60, workloads=("n77_f16",)))
    active = {a.split(" ")[0] for a in result.environment["sandbox"]["active"]}
    if not active & {"uid", "landlock"}:
        pytest.skip("this machine confines the candidate neither by uid nor by landlock")
    assert (result.verdict, result.reason) == ("error", "sandbox_denied"), result.detail
    assert "planted_bytecode.pyc" in result.detail  # the read before it went through
    assert not (warm_cache / "planted_bytecode.pyc").exists()
    expert = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu", workloads=("n77_f16",)))
    assert expert.verdict == "pass", expert.detail


def test_a_pair_prestarted_before_the_cache_was_warm_still_serves(toy_task):
    """Workers started without the prefix run the same code: the cache warming up between two evaluations must not
    make the next one discard the pair the last one started for it."""
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    try:
        ev.env.pop("PYTHONPYCACHEPREFIX", None)
        before = ev.prestart_key()
        ev.env["PYTHONPYCACHEPREFIX"] = "/somewhere/warm"
        assert ev.prestart_key() == before
        ev.env["TRITON_INTERPRET"] = "0"  # any other difference in the environment still tells pairs apart
        assert ev.prestart_key() != before
    finally:
        ev.close()
