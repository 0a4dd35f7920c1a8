"""The Ray executor on a local Ray instance with two fake GPUs: the same verdicts as the embedded executor,
and no cell lost when an evaluation actor is killed mid-evaluation.

Kernels run in Triton's interpreter, so to keep this short every distinct evaluation (task, candidate bytes)
and compile report runs once, on the task's first cpu workload, and is shared through files by every process
that asks for it again (the Ray actors and tasks, then the embedded executor): `SharedEvals`. The Ray run goes
first, so the real evaluations happen in its actors (compile reports in its agent tasks); the embedded run of
the same matrix then reads them.
"""

import asyncio
import dataclasses
import fcntl
import hashlib
import json
import pickle
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from d2kbench.agent.evalservice import LocalEvalService
from d2kbench.cli import main as d2k
from d2kbench.evaluate.evaluator import EvalOptions
from d2kbench.evaluate.result import EvalResult
from d2kbench.runs.cells import build_matrix
from d2kbench.runs.command import run_matrix
from d2kbench.runs.executor import RunSettings
from d2kbench.runs.store import Store
from d2kbench.suite import load_suite

ray = pytest.importorskip("ray")

from d2kbench.runs.ray_executor import (  # noqa: E402
    EvalActors,
    EvalPool,
    RayExecutor,
    plan_eval_actors,
    run_matrix_on_ray,
)

FAKE_GPU_ACTORS = EvalActors(count=2, device="cpu")  # each holds one of the fake GPUs, evaluates on cpu


class SharedEvals(LocalEvalService):
    """A cpu evaluation service that evaluates each (task, candidate bytes) once across processes (files in
    `cache`, one lock each), on the task's first cpu workload."""

    def __init__(self, device: str, cache: Path):
        super().__init__([device])
        self.cache = cache

    async def shared(self, kind: str, task, candidate, compute):
        digest = hashlib.sha256(candidate.read_bytes()).hexdigest()[:16]
        path = self.cache / f"{kind}-{task.id}-{digest}.pickle"
        with open(path.with_suffix(".lock"), "w") as lock:
            await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
            if not path.exists():
                path.with_suffix(".running").touch()
                path.write_bytes(pickle.dumps(await compute()))
            return pickle.loads(path.read_bytes())

    async def evaluate(self, task, candidate, options):
        one = dataclasses.replace(options, workloads=(task.split("cpu")[0].name,))
        return await self.shared("eval", task, candidate, lambda: super(SharedEvals, self).evaluate(task, candidate,
                                                                                                    one))

    async def compile_report(self, task, candidate):
        return await self.shared("compile", task, candidate,
                                 lambda: super(SharedEvals, self).compile_report(task, candidate))


@dataclass(frozen=True)
class SharedEvalsFactory:
    """device -> SharedEvals over one cache folder (what the Ray actors and compile tasks build theirs with)."""

    cache: Path

    def __call__(self, device: str) -> SharedEvals:
        return SharedEvals(device, self.cache)


@pytest.fixture(scope="module")
def local_ray():
    # no _node_ip_address: Ray 2.60 turns 127.0.0.1 into the machine's address and listens on every interface
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)  # CPUs for the 2 agent loops
    try:
        yield ray
    finally:
        ray.shutdown()


def outcome(row) -> tuple:
    return tuple(row[c] for c in ("key", "status", "failure", "verdict", "reason", "end_reason", "turns_used",
                                  "submitted", "mode", "solution"))


def event_types(store: Store, row) -> list[str]:
    path = store.root / store.attempts(row["key"])[-1]["trajectory"]
    return [json.loads(line)["type"] for line in path.read_text().splitlines()]


@pytest.mark.timeout(300)
def test_scripted_expert_gives_the_same_verdicts_on_ray_as_embedded(local_ray, tmp_path, capsys):
    # one task, two configs: the four tasks, embedded, are test_runs_pipeline's (what is compared here is the
    # executor, not the suite)
    tasks = [t for t in load_suite() if t.id == "moe_align_block_size"]
    assert len(tasks) == 1
    matrix = build_matrix(["scripted/expert"], tasks, ["none", "L1+L2+L3"], seeds=1, turns=10)
    settings = RunSettings(devices=["cpu"], concurrency=2)
    shared = SharedEvalsFactory(tmp_path / "cache")
    shared.cache.mkdir()

    on_ray = Store(tmp_path / "ray")
    assert run_matrix_on_ray(on_ray, matrix, settings, actors=FAKE_GPU_ACTORS, service_factory=shared) == 0
    assert "2 evaluation actor(s)" in capsys.readouterr().out
    embedded = Store(tmp_path / "embedded")
    assert run_matrix(embedded, matrix, settings, evals=shared("cpu")) == 0

    ray_rows, embedded_rows = on_ray.rows(), embedded.rows()
    assert len(ray_rows) == 2 and [outcome(r) for r in ray_rows] == [outcome(r) for r in embedded_rows]
    assert {(r["status"], r["verdict"], r["mode"]) for r in ray_rows} == {("done", "pass", "interpreter")}
    for row, twin in zip(ray_rows, embedded_rows, strict=True):
        assert event_types(on_ray, row) == event_types(embedded, twin)
        assert (on_ray.root / store_workspace(on_ray, row) / "solution.py").read_text() == row["solution"]
        final = json.loads(row["eval_json"])
        assert final["environment"]["ray"]["actor"] in (0, 1)  # evaluated by an evaluation actor
        assert final["candidate"] == str(on_ray.root / store_workspace(on_ray, row) / "solution.py")
        header = json.loads((on_ray.root / on_ray.attempts(row["key"])[0]["trajectory"]).read_text().split("\n")[0])
        assert header["settings"]["executor"] == "ray" and header["settings"]["devices"] == ["cpu", "cpu"]
    # the expert's bytes arrived intact: one evaluation per task, of the expert's very bytes (`SharedEvals.shared`)
    evaluated = sorted(p.name for p in shared.cache.glob("eval-*.pickle"))
    assert evaluated == sorted(f"eval-{t.id}-{hashlib.sha256(t.expert_path.read_bytes()).hexdigest()[:16]}.pickle"
                               for t in tasks)

    capsys.readouterr()
    assert run_matrix_on_ray(on_ray, matrix, settings, actors=FAKE_GPU_ACTORS, service_factory=shared) == 0
    assert "2 cells, 2 done already, 0 to run" in capsys.readouterr().out
    assert on_ray.db.execute("SELECT count(*) FROM attempts").fetchone()[0] == 2
    on_ray.close()
    embedded.close()


def store_workspace(store: Store, row) -> str:
    return store.attempts(row["key"])[-1]["workspace"]


@pytest.mark.timeout(300)
def test_killing_the_evaluation_actor_mid_evaluation_loses_no_cell(local_ray, toy_task, tmp_path, capsys):
    matrix = build_matrix(["scripted/expert"], [toy_task], ["none"], seeds=2, turns=10)
    shared = SharedEvalsFactory(tmp_path / "cache")
    shared.cache.mkdir()
    one_actor = dataclasses.replace(FAKE_GPU_ACTORS, count=1)
    codes = []

    def drive() -> None:  # the driver, in a thread (the store belongs to it) while this one kills the actor
        store = Store(tmp_path / "run")
        try:
            codes.append(run_matrix_on_ray(store, matrix, RunSettings(concurrency=2), actors=one_actor,
                                           service_factory=shared))
        finally:
            store.close()

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        wait_for(lambda: list(shared.cache.glob("eval-*.running")))  # the actor is evaluating
        ray.kill(ray.get_actor("d2k-eval-0"), no_restart=False)
    finally:
        driver.join(timeout=240)
    assert codes == [0]
    store = Store(tmp_path / "run")
    assert "1 evaluation(s) lost with their actor and retried on a restarted one" in capsys.readouterr().out
    rows = store.rows()
    assert [(r["status"], r["verdict"], r["attempts"]) for r in rows] == [("done", "pass", 1)] * 2
    assert store.db.execute("SELECT count(*) FROM attempts").fetchone()[0] == 2
    for row in rows:
        assert event_types(store, row).count("final_evaluation") == 1
    store.close()


def wait_for(probe, timeout: float = 120.0):
    """Poll `probe` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_eval_actor_plan_and_usage_errors(capsys):
    assert plan_eval_actors("auto", 4.0) == EvalActors(4, "cuda", {"num_gpus": 1, "num_cpus": 0})
    assert plan_eval_actors("auto", 0) == plan_eval_actors("cpu", 8) == EvalActors(1, "cpu", {"num_cpus": 0})
    base = ["run", "--model", "scripted/expert", "--tasks", "all", "--out", "/nonexistent/never-written"]
    assert d2k([*base, "--executor", "ray", "--devices", "cuda:0"]) == 2
    assert "--devices is auto" in capsys.readouterr().err
    assert d2k([*base, "--ray-address", "127.0.0.1:6379"]) == 2
    assert "--ray-address needs --executor ray" in capsys.readouterr().err
    assert not Path("/nonexistent").exists()


def test_a_lost_agent_task_is_infra_and_an_agent_bug_is_a_harness_error():
    executor = RayExecutor.__new__(RayExecutor)
    assert executor.failure_of(ray.exceptions.WorkerCrashedError()) == "infra"
    assert executor.failure_of(ray.exceptions.NodeDiedError("node lost")) == "infra"
    bug = ray.exceptions.RayTaskError("agent_loop", "Traceback ...", RuntimeError("bug"))
    assert executor.failure_of(bug) == "harness_error"


class StandInActor:
    """An evaluation actor's handle for `EvalPool` alone: `evaluate` fails with the next of `losses`, then
    passes; `ready` raises `ready_error` (Ray gave the actor up) or answers."""

    def __init__(self, losses: int, ready_error: Exception | None = None):
        self.losses, self.ready_error, self.calls = losses, ready_error, 0
        self.evaluate = type("Method", (), {"remote": self.evaluate_call})()
        self.ready = type("Method", (), {"remote": self.ready_call})()

    async def evaluate_call(self, task, name, source, options):
        self.calls += 1
        if self.calls <= self.losses:
            raise ray.exceptions.ActorUnavailableError("the actor is restarting", None)
        return EvalResult(task=task.id, candidate=name)

    async def ready_call(self):
        if self.ready_error:
            raise self.ready_error
        return True


def pool_evaluations(pool: EvalPool, task, count: int) -> list[EvalResult]:
    async def evaluate_all():
        results = [await pool.evaluate(task, "solution.py", b"", EvalOptions()) for _ in range(count)]
        await asyncio.sleep(0)  # let a lost actor's rejoin finish
        return results

    return asyncio.run(evaluate_all())


def test_pool_retries_a_lost_evaluation_once_then_answers_infra(toy_task):
    flaky = StandInActor(losses=1)
    pool = EvalPool([flaky])
    [result] = pool_evaluations(pool, toy_task, 1)
    assert result.verdict == "pass" and flaky.calls == 2 and pool.stats() == {"alive": 1, "in_flight": 0, "lost": 1}

    stubborn = StandInActor(losses=2)
    pool = EvalPool([stubborn])
    [result] = pool_evaluations(pool, toy_task, 1)
    assert (result.verdict, result.reason) == ("infra", "worker_lost")
    assert result.detail.count("ActorUnavailableError") == 2
    assert stubborn.calls == 2 and pool.stats() == {"alive": 1, "in_flight": 0, "lost": 2}  # back once restarted

    doomed = StandInActor(losses=10, ready_error=ray.exceptions.ActorDiedError())  # Ray gave it up
    pool = EvalPool([doomed])
    first, second = pool_evaluations(pool, toy_task, 2)
    assert (first.verdict, first.reason, second.verdict, second.reason) == ("infra", "worker_lost") * 2
    assert "no evaluation actor is left" in first.detail and "no evaluation actor is left" in second.detail
    assert doomed.calls == 1 and pool.stats() == {"alive": 0, "in_flight": 0, "lost": 1}
