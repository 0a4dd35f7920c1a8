"""Check the profile tool's ncu summary on the GPU: each task's expert, sandboxed as a candidate would be.

Run on the GPU machine from the repository root (as the evaluator runs, root for the sandbox's uid):

    PYTHONPATH=src python3 bench/diag/ncu_profile_check.py [--timeout 120] [--tasks IDS]

For each task it runs `profile_ncu` on the expert's file (staged and confined exactly like a candidate)
on the first scored workload and prints the summary as the agent would see it. When that fails, it also
runs ncu on the same expert call without the sandbox (bench/ncu_target.py, trusted code only), to tell
ncu's own problems (permissions, metric names) apart from the sandbox's, and then sandboxed again with one
mechanism left out at a time (`BISECT`), to name the one that stops ncu. Exits 1 if any sandboxed run failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from d2kbench.agent.tools import format_ncu
from d2kbench.evaluate.ncu import failure_message, ncu_available, ncu_command, parse_raw_csv, profile_ncu
from d2kbench.suite import Task, load_suite

ROOT = Path(__file__).resolve().parents[2]
# Left out, one try each on a failure. Landlock alone was the one (bench/results/2026-12-03-h200-owed-2): not its
# scope (abstract unix sockets, signals) nor its TCP rule, nor any one of /dev/shm, /tmp, /dev, /proc, /sys, /root,
# /var, /run opened wholly; /opt opened wholly let ncu work (bench/results/2026-12-03-h200-owed-3). So: /opt to
# reading only (whether ncu needs more than reading there), then each folder under /opt wholly, then /opt.
BISECT = (("landlock",),)
OPT = [str(p) for p in sorted(Path("/opt").iterdir()) if p.is_dir()] if Path("/opt").is_dir() else []
GRANTS = (("ro:/opt",), *((folder,) for folder in OPT), ("/opt",))


def unconfined(task: Task, workload: str, timeout_s: float) -> str:
    """ncu on bench/ncu_target.py (the expert, trusted), with the same metrics: a one-line verdict."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "ncu.csv"
        command = [*ncu_command(log), sys.executable, str(ROOT / "bench" / "ncu_target.py"), task.id, workload]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout_s:.0f} s"
        output = log.read_text(errors="replace") if log.exists() else ""
        kernels = parse_raw_csv(output)
        if kernels:
            return f"OK, {len(kernels)} kernel launches"
        return f"exit {done.returncode}: {failure_message(None, output + done.stdout, done.stderr)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per profiled run")
    parser.add_argument("--tasks", default="", help="task ids, comma-separated (default: all)")
    args = parser.parse_args()
    chosen = [t for t in args.tasks.split(",") if t]
    reason = ncu_available()
    if reason:
        print(f"ncu is not available here: {reason}")
        return 1
    version = subprocess.run(["ncu", "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    params = Path("/proc/driver/nvidia/params")
    admin = [line for line in params.read_text().splitlines() if "Profiling" in line] if params.exists() else []
    print(f"{version[-1] if version else 'ncu: no version'}; uid {os.geteuid()}; {'; '.join(admin) or 'no params'}")
    print(f"ncu at {Path(shutil.which('ncu') or 'ncu').resolve()}; /opt holds {OPT}")
    failed = 0
    tasks = [t for t in load_suite() if not chosen or t.id in chosen]
    for task in tasks:
        workload = task.split("scored")[0].name
        profile = profile_ncu(task, task.expert_path, "cuda:0", workload, timeout_s=args.timeout)
        print(f"\n== {task.id} (expert, sandboxed)\n{format_ncu(profile)}")
        if profile.error:
            failed += 1
            print(f"unconfined ncu on the same call: {unconfined(task, workload, args.timeout)}")
            for skip in BISECT:  # which mechanism stops ncu: the expert is trusted code
                again = profile_ncu(task, task.expert_path, "cuda:0", workload, args.timeout, sandbox_skip=skip)
                verdict = again.error or f"OK, {len(again.kernels)} kernel launches"
                print(f"sandboxed without {'+'.join(skip)}: {verdict}")
                if skip == ("landlock",) and not again.error:
                    for grant in GRANTS:
                        opened = profile_ncu(task, task.expert_path, "cuda:0", workload, args.timeout,
                                             sandbox_grant=grant)
                        print(f"sandboxed, landlock opening {'+'.join(grant)}: "
                              f"{opened.error or f'OK, {len(opened.kernels)} kernel launches'}", flush=True)
                        if not opened.error and grant != ("ro:/opt",):
                            break  # the first that works names the folder
    print(f"\n{failed} of {len(tasks)} tasks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
