"""The sandbox around a candidate's worker process.

The parent (`Sandbox`) prepares a uid, a pids cgroup and the candidate's folders; the child enters
the sandbox at start, before it loads the candidate (`run_worker`: in a worker forked from a server that has
imported torch, `forkserver`, or in a fresh interpreter, `python -m d2kbench.evaluate.sandbox PLAN --
WORKER_ARGS`, before it imports torch), reports what it applied on the reply pipe, then runs the worker. In order:

- **pids cgroup** (v2, or the v1 `pids` hierarchy): at most `max_tasks` processes and threads, all
  killed together; `pids.events` tells a fork bomb apart from other crashes.
- **network namespace**: a fresh one with no interface up, so no network at all. Under a profiler
  (ncu) whose front end must reach the process over loopback TCP, the front end is started in a
  fresh namespace with only `lo` up (`python -m d2kbench.evaluate.sandbox --loopback-netns -- CMD`)
  and the child stays in it (`Plan.profiler_ports`): still no network beyond the two of them.
- **rlimits**: address space (CPU only: CUDA reserves terabytes of virtual memory), CPU seconds,
  processes (`RLIMIT_NPROC`, counted per uid), no core files.
- **unprivileged uid**: a uid of its own (never another worker's), so the candidate can neither
  signal, trace nor write the evaluator's root-owned processes and files. Where Python lives in a
  folder only root can enter (`/root/.pyenv`), the uid keeps `CAP_DAC_READ_SEARCH` (reads only),
  and landlock is what bounds its reads.
- **landlock**: reads of the Python installation, system folders, the install prefixes of the
  programs on PATH (Triton runs the C compiler and ptxas), `d2kbench/__init__.py` and
  `d2kbench/evaluate/` only (never the task folders, the rest of the package or the repository);
  writes to its scratch folder and spool, the GPU's device files and its own /proc entries only;
  no TCP (ABI 4; under a profiler, only its `profiler_ports`) and no signals out of the sandbox
  (ABI 6). Folders that contain a hidden path stay listable (names, not contents).

A mechanism the machine lacks falls back with one logged warning; `status` says which were active.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import os
import random
import resource
import shutil
import signal
import site
import socket
import stat
import struct
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from d2kbench.evaluate import candidate_cache

log = logging.getLogger("d2kbench.sandbox")

MECHANISMS = ("cgroup_pids", "netns", "rlimit_memory", "rlimit_cpu", "uid", "landlock")
UID_LOCKS = Path("/tmp/d2kbench-uids")
_PACKAGE = Path(__file__).resolve().parents[1]  # src/d2kbench
_warned: set[str] = set()


@dataclass
class SandboxSettings:
    """Limits for one candidate worker; None memory means half the machine's RAM."""

    memory_bytes: int | None = None
    cpu_seconds: int = 3600
    max_tasks: int = 256  # processes and threads together


@dataclass
class Plan:
    """What the child applies to itself: everything is decided in the parent."""

    uid: int | None
    cgroup: str | None
    home: str
    spool: str
    hidden: list[str]
    memory_bytes: int | None
    cpu_seconds: int
    nproc: int  # RLIMIT_NPROC: above the cgroup's limit where there is one, so that the cgroup counts the hits
    gpu: bool
    package: str = str(_PACKAGE)
    profiler_ports: list[int] = field(default_factory=list)  # TCP to a profiler's front end in the parent's netns
    skip: list[str] = field(default_factory=list)  # mechanisms left out: diagnoses only, never an evaluation
    # paths landlock leaves open: "ro:PATH" to reading (the task folders and this package still hidden), as the
    # ncu sandbox opens ncu's installation; a bare PATH wholly, for a diagnosis only
    grant: list[str] = field(default_factory=list)


# -- the parent's side -------------------------------------------------------------------------------
class Sandbox:
    """One candidate worker's sandbox, seen from the parent: prepare, watch, kill, release."""

    def __init__(self, settings: SandboxSettings, hidden: list[Path], device: str,
                 profiler_ports: Sequence[int] = (), skip: Sequence[str] = (), grant: Sequence[str] = (),
                 compiles: bool | None = None):
        self.settings, self.hidden, self.gpu = settings, [str(p.resolve()) for p in hidden], device != "cpu"
        # whether the worker compiles kernels (a GPU, or sm_90 compile reports on a CPU), so that its compile
        # cache is worth keeping; the interpreter compiles nothing
        self.compiles = self.gpu if compiles is None else compiles
        self.profiler_ports = list(profiler_ports)  # set: the child stays in the parent's loopback-only netns
        self.skip = list(skip)  # a diagnosis's: which mechanism stops a tool (bench/diag/ncu_profile_check.py)
        self.grant = list(grant)  # what landlock must open for a tool (`Plan.grant`)
        self.uid: int | None = None
        self._uid_lock: Any = None
        self.cgroup: Path | None = None
        self.status: dict[str, Any] = {}
        self.staged_source: Path | None = None  # the candidate file, where its compiled kernels are kept
        self.cache_files: int | None = None  # files of its kept compile cache copied into its folder (GPU only)
        self.staged_uid: int | None = None

    forkable = True  # whether the worker may be forked from a server (`forkserver`): not under a profiler

    def plan(self, home: Path, spool: Path) -> Plan:
        """Take a uid and a cgroup, hand the folders to the uid; what the child applies to itself."""
        self.uid, self._uid_lock = acquire_uid()
        self.cgroup = make_cgroup(self.settings.max_tasks)
        for folder in (home, spool):
            _open_path_to(folder)
            if self.uid is not None:
                os.chown(folder, self.uid, self.uid)
        return Plan(
            uid=self.uid, cgroup=str(self.cgroup) if self.cgroup else None, home=str(home), spool=str(spool),
            hidden=self.hidden, memory_bytes=self.settings.memory_bytes or _half_ram(),
            cpu_seconds=self.settings.cpu_seconds, nproc=self.nproc, gpu=self.gpu,
            profiler_ports=self.profiler_ports, skip=self.skip, grant=self.grant,
        )

    def prepare(self, home: Path, spool: Path) -> list[str]:
        """`plan`, as the command prefix of a fresh interpreter that enters the sandbox and then is the worker."""
        return self.command(self.plan(home, spool))

    def command(self, plan: Plan) -> list[str]:
        """The command prefix of a fresh interpreter that enters the sandbox of `plan` and then is the worker."""
        return [sys.executable, "-m", "d2kbench.evaluate.sandbox", json.dumps(asdict(plan)), "--"]

    def environment(self, env: dict[str, str], home: Path) -> dict[str, str]:
        """The child's environment: every cache and temporary file goes to its own folder."""
        tmp = home / "tmp"
        tmp.mkdir(exist_ok=True)
        if self.uid is not None:
            os.chown(tmp, self.uid, self.uid)
        user = "d2k-candidate"  # the uid has no passwd entry: getpass.getuser() reads these first
        return {**env, "HOME": str(home), "TMPDIR": str(tmp), "TRITON_CACHE_DIR": str(home / "triton"),
                "TRITON_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), "USER": user, "LOGNAME": user}

    def stage(self, source: Path, home: Path) -> Path:
        """A copy of the candidate file in its folder (not on sys.path), owned by its uid: what the worker loads."""
        folder = home / "source"
        folder.mkdir(exist_ok=True)
        staged = folder / source.name
        shutil.copyfile(source, staged)
        if self.uid is not None:
            os.chown(folder, self.uid, self.uid)
            os.chown(staged, self.uid, self.uid)
        if self.compiles:
            self.staged_source, self.staged_uid = source, self.uid
            self.cache_files = candidate_cache.restore(source, home / "triton", self.uid)
        return staged

    def keep_cache(self, home: Path) -> None:
        """Keep the candidate's compiled kernels for its next evaluation (after its processes are gone)."""
        if self.staged_source is not None:
            candidate_cache.save(self.staged_source, home / "triton", self.staged_uid)

    def record(self, status: dict[str, Any]) -> None:
        """Keep the child's report; warn once per process for each mechanism that is missing."""
        self.status = status
        for name, why in status.get("missing", {}).items():
            if name not in _warned:
                _warned.add(name)
                log.warning("sandbox: %s is not active (%s); the candidate runs without it", name, why)

    def process_limit_hit(self) -> bool:
        """Did the candidate run into its process limit (a fork bomb)?"""
        if self.cgroup is not None:
            events = _read(self.cgroup / "pids.events")
            if any(line.split()[:1] == ["max"] and int(line.split()[1]) > 0 for line in events.splitlines()):
                return True
        return self.uid is not None and count_tasks(self.uid) >= self.nproc - 1

    @property
    def nproc(self) -> int:
        return self.settings.max_tasks + (32 if self.cgroup else 0)

    def kill_all(self) -> None:
        """Kill every process of the sandbox, also those that left the worker's process group."""
        for _ in range(50):
            pids = _cgroup_pids(self.cgroup) if self.cgroup else []
            if self.uid is not None:
                pids += uid_pids(self.uid)
            if not pids:
                return
            if self.cgroup and (self.cgroup / "cgroup.kill").exists():
                _write(self.cgroup / "cgroup.kill", "1")
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def release(self) -> None:
        """Kill what is left, remove the cgroup, give the uid back (once: the uid may go to another sandbox)."""
        self.kill_all()
        if self.cgroup is not None:
            for _ in range(100):
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)
            self.cgroup = None
        if self._uid_lock is not None:
            self._uid_lock.close()
            self._uid_lock = None
        self.uid = None


def acquire_uid() -> tuple[int | None, Any]:
    """An unprivileged uid no other sandbox on this machine holds, and its lock (held while in use)."""
    if os.geteuid() != 0:
        return None, None
    first, count = _uid_range()
    try:
        UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None, None
    start = random.randrange(count)
    for k in range(min(count, 4096)):
        uid = first + (start + k) % count
        handle = open(UID_LOCKS / f"{uid}.lock", "w")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        for pid in uid_pids(uid):  # left behind by an evaluator that died without releasing
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return uid, handle
    return None, None


def _uid_range() -> tuple[int, int]:
    """Where sandbox uids come from: 200000.. on a host, the top of the map in a user namespace."""
    ranges = []
    for line in _read(Path("/proc/self/uid_map")).splitlines():
        inside, _, count = (int(x) for x in line.split())
        ranges.append((inside, inside + count))
    for lo, hi in ranges:
        if lo <= 200_000 and 265_536 <= hi:
            return 200_000, 65_536
    hi = max((h for _, h in ranges), default=65_536)
    return max(10_000, hi // 2), max(1, hi - 1 - max(10_000, hi // 2))  # below the map's end (nobody)


def proc_state(stat: Path) -> str:
    """The one-letter state (R, S, T, Z, ...) in a /proc `stat` file; "" when it is gone."""
    fields = _read(stat).rpartition(")")[2].split()
    return fields[0] if fields else ""


def uid_pids(uid: int) -> list[int]:
    """The live processes of `uid` (zombies, already dead, left out)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and proc_state(Path(entry.path, "stat")) != "Z":
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def count_tasks(uid: int) -> int:
    """Processes and threads of `uid` (what RLIMIT_NPROC counts)."""
    total = 0
    for pid in uid_pids(uid):
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return total


def make_cgroup(max_tasks: int) -> Path | None:
    """A fresh pids cgroup below this process's own (v2 first, then v1), or None."""
    for base in _pids_hierarchies():
        _remove_stale_cgroups(base)
        path = base / f"d2k-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            continue
        if _write(path / "pids.max", str(max_tasks)):
            return path
        try:
            path.rmdir()
        except OSError:
            pass
    return None


def _remove_stale_cgroups(base: Path, age_s: float = 600.0) -> None:
    """Remove empty sandbox cgroups older than `age_s` (left by an evaluator that was killed)."""
    for path in base.glob("d2k-*"):
        try:
            if time.time() - path.stat().st_mtime > age_s and not _read(path / "cgroup.procs").strip():
                path.rmdir()
        except OSError:
            pass


def _pids_hierarchies() -> list[Path]:
    """This process's cgroup folder in each mounted hierarchy that has the pids controller."""
    own: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    found: dict[str, list[Path]] = {"cgroup2": [], "cgroup": []}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1 :]
        fstype, options, root, mount = tail[0], tail[2].split(","), fields[3], Path(fields[4])
        key = "" if fstype == "cgroup2" else "pids" if fstype == "cgroup" and "pids" in options else None
        if key is None or key not in own:
            continue
        folder = mount / os.path.relpath(own[key], root).removeprefix(".")
        if fstype == "cgroup2":
            if "pids" not in _read(folder / "cgroup.controllers").split():
                continue
            if "pids" not in _read(folder / "cgroup.subtree_control").split():
                _write(folder / "cgroup.subtree_control", "+pids")  # fails where the folder holds processes
        found[fstype].append(folder)
    return found["cgroup2"] + found["cgroup"]


def _cgroup_pids(cgroup: Path) -> list[int]:
    return [int(x) for x in _read(cgroup / "cgroup.procs").split()]


def _open_path_to(folder: Path) -> None:
    """Let an unprivileged uid walk (not list) into `folder`, which the evaluator made 0700."""
    for parent in (folder.parent,):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)


def _half_ram() -> int:
    for line in _read(Path("/proc/meminfo")).splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 // 2
    return 16 << 30


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


# -- the child's side --------------------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_KEEPCAPS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 38, 8, 47, 2
CAP_DAC_READ_SEARCH = 2
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE = 1 << 14
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
NET_TCP = 0b11  # bind and connect
RULE_NET_PORT = 2
SCOPE_ALL = 0b11  # abstract unix sockets and signals out of the domain
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/sys", "/proc/self", "/proc/cpuinfo",
               "/proc/meminfo", "/proc/stat", "/proc/driver/nvidia", "/dev/urandom", "/dev/random", "/dev/zero")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


def _syscall(number: int, *args: Any) -> int:
    """syscall(2), with integers passed as C longs (it is variadic)."""
    return _libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def enter(plan: Plan) -> dict[str, Any]:
    """Apply the plan to this process; what is active and why the rest is not."""
    active: list[str] = []
    missing: dict[str, str] = {}

    def attempt(name: str, step) -> None:
        if name in plan.skip:
            missing[name] = "left out for a diagnosis"
            return
        try:
            note = step()
            active.append(name if not note else f"{name} ({note})")
        except (OSError, ValueError, RuntimeError) as exc:
            missing[name] = str(exc) or type(exc).__name__

    attempt("cgroup_pids", lambda: _join_cgroup(plan))
    attempt("netns", _loopback_only_or_unshare if plan.profiler_ports else _unshare_network)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    attempt("rlimit_memory", lambda: _limit_memory(plan))
    attempt("rlimit_cpu", lambda: resource.setrlimit(resource.RLIMIT_CPU, (plan.cpu_seconds, plan.cpu_seconds + 5)))
    attempt("uid", lambda: _drop_uid(plan))
    attempt("landlock", lambda: _landlock(plan))
    return {"active": active, "missing": missing, "uid": plan.uid if any(a.startswith("uid") for a in active) else None}


def _unshare_network() -> None:
    _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")


def _interfaces() -> list[str]:
    """The network interfaces of this process's namespace."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines if ":" in line)


def _loopback_only_or_unshare() -> str:
    """Under a profiler: stay in the parent's namespace if it holds `lo` alone, else take a fresh one
    (no network, and no profiler either: better than a sandbox with a network)."""
    others = [name for name in _interfaces() if name != "lo"]
    if not others:
        return "the profiler's: loopback only"
    _unshare_network()
    return f"fresh: the parent's namespace has {', '.join(others)}, so the profiler cannot connect"


SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_namespace() -> None:
    """Move this process into a fresh network namespace with only its loopback interface up."""
    _unshare_network()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _join_cgroup(plan: Plan) -> None:
    if not plan.cgroup:
        raise RuntimeError("no writable cgroup hierarchy with the pids controller")
    Path(plan.cgroup, "cgroup.procs").write_text(str(os.getpid()))


def _limit_memory(plan: Plan) -> str:
    if plan.gpu:
        raise RuntimeError("an address-space limit breaks CUDA, which reserves terabytes of virtual memory")
    resource.setrlimit(resource.RLIMIT_AS, (plan.memory_bytes, plan.memory_bytes))
    return f"{plan.memory_bytes >> 20} MiB"


def _drop_uid(plan: Plan) -> str:
    if plan.uid is None:
        raise RuntimeError("not root, or no free uid")
    keep = not all(_world_readable(Path(p)) for p in _read_roots(plan))
    resource.setrlimit(resource.RLIMIT_NPROC, (plan.nproc, plan.nproc))
    if keep:
        _check(_libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setresgid(plan.uid, plan.uid, plan.uid)
    os.setresuid(plan.uid, plan.uid, plan.uid)
    if not keep:
        return str(plan.uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)(*([1 << CAP_DAC_READ_SEARCH] * 3), 0, 0, 0)  # effective, permitted, inheritable
    _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0), "ambient capability")
    return f"{plan.uid}, keeps CAP_DAC_READ_SEARCH: Python lives in a folder only root can read"


def _world_readable(path: Path) -> bool:
    """Can any user open `path` (every folder on the way searchable, the path itself readable)?"""
    try:
        for folder in list(path.parents)[::-1]:
            if not folder.stat().st_mode & stat.S_IXOTH:
                return False
        return bool(path.stat().st_mode & stat.S_IROTH)
    except OSError:
        return True  # a missing path needs no access


def _read_roots(plan: Plan) -> list[str]:
    """Folders the candidate may read: Python's installation and the system's (not the task's), and the bytecode
    of the workers' imports (`bytecode.py`, the evaluator's: a uid of its own cannot write it)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), *SYSTEM_READ, *_tool_prefixes()}
    if sys.pycache_prefix:
        roots.add(sys.pycache_prefix)
    cwd = os.getcwd()
    roots |= {p for p in sys.path if p and os.path.isdir(p) and os.path.abspath(p) != cwd}
    return sorted(r for r in roots if os.path.exists(r))


def _tool_prefixes() -> set[str]:
    """Install prefixes of the programs on PATH: Triton runs the C compiler (`/opt/gcc/bin/gcc`) and ptxas."""
    prefixes = set()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(entry)
        if path.is_absolute() and path.is_dir():
            prefixes.add(str(path.parent if path.name == "bin" and path.parent != Path("/") else path))
    return prefixes


def _landlock(plan: Plan) -> str:
    abi = _syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, 1)
    if abi < 1:
        raise RuntimeError(f"the kernel has no landlock ({os.strerror(ctypes.get_errno())})")
    handled = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    net = NET_TCP if abi >= 4 and "landlock_tcp" not in plan.skip else 0  # the skips: diagnoses only
    scope = SCOPE_ALL if abi >= 6 and "landlock_scope" not in plan.skip else 0
    attr = _RulesetAttr(handled, net, scope)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _check(_syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0), "landlock ruleset")
    try:
        hidden = [Path(p) for p in [*plan.hidden, plan.package]]
        for root in _read_roots(plan):
            _allow_except(ruleset, Path(root), FS_READ, hidden)
        package = Path(plan.package)
        _allow(ruleset, package / "__init__.py", FS_READ)
        _allow(ruleset, package / "evaluate", FS_READ)
        # CUDA's initialisation fails (error 304) unless it can rewrite its own /proc entries (fopen "w")
        for path in ("/dev/null", "/proc/self", *(str(p) for p in Path("/dev").glob("nvidia*"))):
            _allow(ruleset, Path(path), FS_READ | FS_WRITE_FILE | FS_TRUNCATE, handled)
        for folder in (plan.home, plan.spool, *plan.grant):
            if folder.startswith("ro:"):
                _allow_except(ruleset, Path(folder.removeprefix("ro:")), FS_READ, hidden)
            else:
                _allow(ruleset, Path(folder), handled, handled)
        for port in plan.profiler_ports if net else ():
            rule = _NetPort(NET_TCP, port)
            _check(_syscall(SYS_LANDLOCK_ADD_RULE, ruleset, RULE_NET_PORT, ctypes.byref(rule), 0), f"TCP port {port}")
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    ports = plan.profiler_ports
    tcp = f"TCP only to the profiler's ports {min(ports)}-{max(ports)}" if ports else "no TCP"
    extras = ([tcp] if attr.handled_access_net else []) + (["no signals out"] if attr.scoped else [])
    return ", ".join([f"ABI {abi}", *extras])


def _allow_except(ruleset: int, root: Path, access: int, hidden: list[Path]) -> None:
    """Allow `access` beneath `root` except beneath the hidden paths (their folders stay listable)."""
    inside = [h for h in hidden if h == root or root in h.parents]
    if not inside:
        _allow(ruleset, root, access)
        return
    if root in inside or not root.is_dir():
        return
    _allow(ruleset, root, FS_READ_DIR)
    for child in root.iterdir():
        _allow_except(ruleset, child, access, inside)


def _allow(ruleset: int, path: Path, access: int, handled: int = FS_READ | FS_WRITE_FILE) -> None:
    """Add one landlock rule (rights a file cannot carry, or the ruleset does not handle, dropped)."""
    access &= handled
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent here (no GPU, no /lib32, ...)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FS_FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        _check(_syscall(SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock rule for {path}")
    finally:
        os.close(fd)


def main() -> None:
    """`python -m d2kbench.evaluate.sandbox PLAN -- WORKER_ARGS`: enter the sandbox, then be the worker.
    `python -m d2kbench.evaluate.sandbox --loopback-netns -- CMD...`: run CMD (a profiler's front end) in a
    fresh network namespace with only loopback up; where none can be made (not root), in this one, with a
    warning: the child then takes a namespace of its own if it can, or runs without one, as it would anyway."""
    split = sys.argv.index("--")
    if sys.argv[1] == "--loopback-netns":
        try:
            loopback_namespace()
        except OSError as exc:
            print(f"sandbox: no loopback-only network namespace for the profiler: {exc}", file=sys.stderr)
        os.execvp(sys.argv[split + 1], sys.argv[split + 1 :])
    run_worker(json.loads(sys.argv[1]), sys.argv[split + 1 :])


def run_worker(plan: dict[str, Any] | None, worker_args: list[str]) -> None:
    """Enter the sandbox of `plan` (a `Plan` as a dict; None: none), say what is active on the reply pipe, then be
    the worker with `worker_args`: in a fresh interpreter (`main`) or a fork of a server (`forkserver`)."""
    if plan is not None:
        status = enter(Plan(**plan))
        for name, why in status["missing"].items():
            print(f"sandbox: {name} is not active: {why}", file=sys.stderr, flush=True)
        from d2kbench.evaluate import channel

        fd_out = int(worker_args[worker_args.index("--fd-out") + 1])
        channel.write_message(fd_out, {"ok": True, "sandbox": status})
    sys.argv = ["d2kbench.evaluate.worker", *worker_args]
    from d2kbench.evaluate import worker

    worker.main()


if __name__ == "__main__":
    main()
