"""Input sets device to device (CUDA IPC) against spool files, on the GPU: each expert evaluated as a candidate
both ways, warm, with the verdicts, the phases, the requests' seconds and the fractions of expert side by side.

    PYTHONPATH=src python3 bench/diag/ipc_inputs.py [--tasks a,b]

`EvalOptions.device_inputs` became the default on GPUs when this showed the same verdicts and a faster
evaluation (bench/results/2026-12-03-h200-owed-3); it also prints what the route check before loading decided.
"""

from __future__ import annotations

import argparse

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.suite import find_task, load_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="")
    args = parser.parse_args()
    tasks = [find_task(t) for t in args.tasks.split(",")] if args.tasks else list(load_suite())
    for task in tasks:
        evaluate(task, task.expert_path, EvalOptions(time=False))  # warms the compile cache
        for device_inputs in (False, True):
            r = evaluate(task, task.expert_path, EvalOptions(device_inputs=device_inputs))
            phases = ", ".join(f"{k} {v:.1f}" for k, v in r.phases_s.items())
            requests = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.requests_s.items(), key=lambda kv: -kv[1])[:10])
            fractions = ", ".join(f"{w.fraction_of_expert:.3f}" for w in r.workloads if w.fraction_of_expert)
            print(f"{task.id} {'IPC  ' if device_inputs else 'files'}: {r.verdict}/{r.reason} {r.elapsed_s:.1f} s "
                  f"({phases}); route {r.environment.get('device_inputs', 'files')}; top requests: {requests}; "
                  f"fractions {fractions}; {r.detail[:300]}", flush=True)


if __name__ == "__main__":
    main()
