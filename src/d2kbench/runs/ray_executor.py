"""The Ray executor: agent loops as Ray tasks on CPUs, evaluations on one Ray actor per GPU, the store in the driver.

The driver runs the same `Executor` as the embedded back end (cells, attempts, trajectories, final
evaluation and summary), with two things moved onto the cluster:

- each cell's agent loop is a Ray task (`agent_loop`) that works in a temporary workspace on its node
  and streams every trajectory event back; the driver writes them, and the workspace's files at the
  end, into the run folder: nothing on the cluster writes the store;
- every evaluation goes through one dispatcher actor (`EvalPool`) to a free evaluation actor
  (`EvalActor`, `num_gpus=1`), which evaluates one candidate at a time, sent as bytes. An actor that
  dies is restarted by Ray and its evaluation retried once, then answered as an `infra` fault.
  Compile reports (the `profile` tool) need no GPU: the agent task compiles them on its own CPU.

Ray is an optional extra (`pip install -e .[ray]`), imported only here. docs/ray.md is the guide.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d2kbench.evaluate.channel import private_folder
from d2kbench.evaluate.evaluator import EvalOptions
from d2kbench.evaluate.result import EvalResult, Failure
from d2kbench.runs.cells import Cell
from d2kbench.runs.executor import Executor, ModelFactory, RunSettings
from d2kbench.runs.store import Store
from d2kbench.suite import Task

if TYPE_CHECKING:
    from d2kbench.agent.evalservice import EvalService
    from d2kbench.agent.loop import AgentOutcome

# device ("cpu" or "cuda:N") -> the service an evaluation actor evaluates with; default `LocalEvalService([device])`
ServiceFactory = Callable[[str], "EvalService"]

# Forwarded to the agent tasks (a node of a cluster does not have the driver's environment).
FORWARDED_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "D2K_PRICES")
AGENT_CPUS = 1  # Ray CPUs per agent loop (mostly waiting on the model and on evaluations)
RESTART_WAIT_S = 600.0  # how long a lost evaluation actor may take to come back before it is given up


def import_ray() -> Any:
    """Ray, with usage statistics off; a clear message when the extra is not installed."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install -e '.[ray]'") from None
    return ray


@dataclass(frozen=True)
class EvalActors:
    """The evaluation actors to start: `count` of them, each holding `resources` and evaluating on `device`.

    `device` is `cuda` (the GPU that Ray gave the actor) or `cpu` (Triton's interpreter). They claim no Ray
    CPU, so that an actor Ray restarts never waits for a CPU that the agent loops hold (while they wait for it).
    """

    count: int
    device: str
    resources: dict[str, float] = field(default_factory=lambda: {"num_gpus": 1, "num_cpus": 0})


def plan_eval_actors(devices: str, cluster_gpus: float) -> EvalActors:
    """`--devices auto`: one actor per GPU of the cluster (one on a CPU when it has none); `cpu`: one on a CPU."""
    if devices not in ("auto", "cpu"):
        raise ValueError(f"with --executor ray, --devices is auto (one evaluation actor per GPU of the cluster) or "
                         f"cpu, got {devices!r}")
    if devices == "auto" and int(cluster_gpus) >= 1:
        return EvalActors(int(cluster_gpus), "cuda")
    return EvalActors(1, "cpu", {"num_cpus": 0})


def assigned_cuda_device(ray: Any) -> str:
    """The GPU that Ray gave this actor, as `cuda:N` of its node, so that the evaluator's per-GPU timing lock
    is the node's (Ray's own CUDA_VISIBLE_DEVICES would make every actor's GPU `cuda:0`)."""
    ids = [str(i) for i in ray.get_gpu_ids()]
    if len(ids) != 1 or not ids[0].isdigit():
        return "cuda:0"
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    return f"cuda:{ids[0]}"


def local_service(device: str) -> EvalService:
    from d2kbench.agent.evalservice import LocalEvalService

    return LocalEvalService([device])


class EvalActor:
    """One evaluation worker (a Ray actor): evaluates one candidate at a time on its device."""

    def __init__(self, index: int, device: str, service_factory: ServiceFactory | None):
        import ray

        self.index = index
        self.device = assigned_cuda_device(ray) if device == "cuda" else device
        self.node = ray.get_runtime_context().get_node_id()
        self.service = (service_factory or local_service)(self.device)

    async def evaluate(self, task: Task, name: str, source: bytes, options: EvalOptions) -> EvalResult:
        scratch = private_folder("d2k-actor-")  # swept by the next one if this actor is killed meanwhile
        try:
            candidate = scratch / name
            candidate.write_bytes(source)
            result = await self.service.evaluate(task, candidate, options)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        result.environment["ray"] = {"actor": self.index, "node": self.node, "device": self.device}
        return result

    def ready(self) -> bool:
        return True


class EvalPool:
    """The dispatcher (a Ray actor): hands each evaluation to a free evaluation actor, one at a time each.

    An evaluation whose actor dies is retried once on the next free actor; the lost actor rejoins the free
    ones once Ray has restarted it (it answers `ready`), or never when Ray gives it up.
    """

    def __init__(self, actors: list[Any]):
        self.actors = actors
        self.free: asyncio.Queue | None = None
        self.alive, self.in_flight, self.lost = len(actors), 0, 0
        self.rejoining: set[asyncio.Task] = set()  # kept referenced until done

    def queue(self) -> asyncio.Queue:
        if self.free is None:
            self.free = asyncio.Queue()
            for actor in self.actors:
                self.free.put_nowait(actor)
        return self.free

    async def evaluate(self, task: Task, name: str, source: bytes, options: EvalOptions) -> EvalResult:
        from ray.exceptions import RayActorError

        failures = []
        for _ in range(2):
            actor = await self.queue().get()
            if actor is None:  # no evaluation actor is left
                self.queue().put_nowait(None)
                failures.append("no evaluation actor is left")
                break
            self.in_flight += 1
            try:
                result = await actor.evaluate.remote(task, name, source, options)
            except RayActorError as exc:  # the actor died (Ray restarts it) or its node went away
                self.lost += 1
                failures.append(f"{type(exc).__name__}: {str(exc).strip()[:300]}")
                rejoining = asyncio.ensure_future(self.rejoin(actor))
                self.rejoining.add(rejoining)
                rejoining.add_done_callback(self.rejoining.discard)
                continue
            finally:
                self.in_flight -= 1
            self.queue().put_nowait(actor)
            return result
        result = EvalResult(task=task.id, candidate=name)
        result.add(Failure("infra", "worker_lost", f"the evaluation was lost with its actor: {'; '.join(failures)}"))
        return result

    async def rejoin(self, actor: Any) -> None:
        """Put `actor` back among the free ones once it answers again; give it up when Ray did, or after
        RESTART_WAIT_S (no node has a GPU for it)."""
        from ray.exceptions import ActorDiedError, RayActorError

        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline:
            try:
                await actor.ready.remote()
            except ActorDiedError:
                break
            except RayActorError:
                await asyncio.sleep(1.0)
                continue
            self.queue().put_nowait(actor)
            return
        self.alive -= 1
        if not self.alive:
            self.queue().put_nowait(None)

    def stats(self) -> dict[str, int]:
        """Evaluation actors alive, evaluations in flight now, and evaluations lost with their actor so far."""
        return {"alive": self.alive, "in_flight": self.in_flight, "lost": self.lost}


@functools.cache
def remote(function_or_class: Any, **options: Any) -> Any:
    """`function_or_class` as a Ray remote function or actor class (made once per process)."""
    return import_ray().remote(**options)(function_or_class) if options else import_ray().remote(function_or_class)


@dataclass
class RayEvalService:
    """The `EvalService` of the agent loops and the driver: evaluations through the pool, compile reports as tasks."""

    pool: Any
    gpu: bool
    service_factory: ServiceFactory | None = None

    async def evaluate(self, task: Task, candidate: Path, options: EvalOptions) -> EvalResult:
        result = await self.pool.evaluate.remote(task, candidate.name, candidate.read_bytes(), options)
        result.candidate = str(candidate)
        return result

    async def compile_report(self, task: Task, candidate: Path) -> list[dict[str, Any]]:
        """Compiled right here, on the agent task's CPU (for sm_90, no GPU needed): a separate Ray task could wait
        for a CPU that the agent loops themselves hold."""
        return await (self.service_factory or local_service)("cpu").compile_report(task, candidate)


def agent_loop(cell: Cell, task: Task, wall_clock_s: float, base_url: str | None, evals: RayEvalService,
               model_factory: ModelFactory | None) -> Iterator[tuple[str, Any]]:
    """One cell's agent run (a Ray task): yields ("event", event) as they happen, then ("outcome", (outcome,
    files)), `files` being the final workspace as {relative path: bytes}."""
    from d2kbench.agent.loop import AgentLimits, run_agent

    events: queue.Queue = queue.Queue()
    done = object()

    def run(workspace: Path) -> AgentOutcome:
        if model_factory is None:
            from d2kbench.agent.models import make_model as factory
        else:
            factory = model_factory
        record = lambda event: events.put(("event", event))
        model = factory(cell.model, base_url=base_url, task=task, record=record)
        limits = AgentLimits(turns=cell.turns, wall_clock_s=wall_clock_s)
        return asyncio.run(run_agent(task, cell.config, model, workspace, evals, record, limits, seed=cell.seed))

    def work() -> None:
        try:
            with tempfile.TemporaryDirectory(prefix="d2k-agent-") as scratch:
                workspace = Path(scratch) / "workspace"
                outcome = run(workspace)
                files = {p.relative_to(workspace).as_posix(): p.read_bytes()
                         for p in sorted(workspace.rglob("*")) if p.is_file()}
            events.put(("outcome", (outcome, files)))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the task, so the driver sees it
            events.put(("error", exc))
        events.put((done, None))

    threading.Thread(target=work, name=f"agent {cell.label}", daemon=True).start()
    while (item := events.get())[0] is not done:
        if item[0] == "error":
            raise item[1]
        yield item


class RayExecutor(Executor):
    """The embedded executor's cells, store and scoring, with each agent loop running as a Ray task."""

    async def run_agent(self, cell: Cell, task: Task, workspace: Path, record: Callable[[dict], None]
                        ) -> AgentOutcome:
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        loop_remote = remote(agent_loop, num_cpus=AGENT_CPUS, max_retries=0)
        stream = loop_remote.options(runtime_env={"env_vars": env} if env else None).remote(
            cell, task, self.settings.wall_clock_s, self.settings.base_url, self.evals, self.model_factory)
        outcome, files = None, {}
        async for ref in stream:
            kind, payload = await ref
            if kind == "event":
                record(payload)
            else:
                outcome, files = payload
        if outcome is None:
            raise RuntimeError("the agent task ended without an outcome")
        for relative, content in files.items():
            path = workspace / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        solution = workspace / outcome.solution.name if outcome.solution else None
        return dataclasses.replace(outcome, solution=solution)

    def failure_of(self, exc: Exception) -> str:
        """A task or node lost on the cluster is `infra`; an exception raised by the agent's code stays a bug."""
        from ray.exceptions import RayError, RayTaskError

        if isinstance(exc, RayError) and not isinstance(exc, RayTaskError):
            return "infra"
        return super().failure_of(exc)


def connect(ray: Any, address: str | None) -> bool:
    """Join the cluster at `address`, or start a local Ray instance; True when this started Ray.

    A Ray already initialised in this process (a test's) is used as it is. Ray (2.60) binds its servers
    on every interface whatever node address it is given, so none is given; the dashboard stays off.
    """
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False)
    return True


def run_matrix_on_ray(store: Store, matrix: list[tuple[Cell, Task]], settings: RunSettings, *,
                      address: str | None = None, devices: str = "auto", actors: EvalActors | None = None,
                      model_factory: ModelFactory | None = None, service_factory: ServiceFactory | None = None) -> int:
    """`run_matrix` on a Ray cluster (`address`, else a local instance); 0 when every cell is done.

    `actors` defaults to `plan_eval_actors(devices, the cluster's GPUs)`; `service_factory` (device ->
    EvalService) to the local evaluator, and is what tests replace.
    """
    from d2kbench.runs.command import run_matrix

    ray = import_ray()
    started = connect(ray, address)
    handles: list[Any] = []
    try:
        actors = actors or plan_eval_actors(devices, ray.cluster_resources().get("GPU", 0))
        actor_class = remote(EvalActor)
        handles = [actor_class.options(name=f"d2k-eval-{i}", max_restarts=-1, max_task_retries=0,
                                       **actors.resources).remote(i, actors.device, service_factory)
                   for i in range(actors.count)]
        pool = remote(EvalPool).options(name="d2k-eval-pool", num_cpus=0).remote(handles)
        handles.append(pool)
        print(f"Ray: {ray.get_runtime_context().gcs_address}, {actors.count} evaluation actor(s) on "
              f"{'a GPU each' if actors.device == 'cuda' else 'CPUs (interpreter)'}", flush=True)
        settings = dataclasses.replace(settings, devices=[actors.device] * actors.count, executor="ray")
        evals = RayEvalService(pool, gpu=actors.device == "cuda", service_factory=service_factory)
        code = run_matrix(store, matrix, settings, model_factory, evals, RayExecutor)
        lost = ray.get(pool.stats.remote())["lost"]
        if lost:
            print(f"Ray: {lost} evaluation(s) lost with their actor and retried on a restarted one", flush=True)
        return code
    finally:
        for handle in handles:
            ray.kill(handle)
        if started:
            ray.shutdown()
