"""Every name in a task's roofline formulas is given on every workload (a numeric param, or one of the names the
reference's `derived` returns), so that a typo fails here and not after a GPU has timed the workload."""

import math

import pytest

from d2kbench.evaluate.worker import load_module
from d2kbench.suite import expr, load_suite, roofline

TASKS = load_suite()


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_every_roofline_name_is_given_on_every_workload(task):
    ref = load_module(task.reference_path, f"roofline_ref_{task.id}")
    cpu = task.split("cpu")[0]
    inputs = ref.make_inputs(cpu, 0, "cpu")
    derived = ref.derived(cpu, inputs) if hasattr(ref, "derived") else {}
    used = expr.names(task.roofline_bytes) | expr.names(task.roofline_flops)
    for w in task.workloads:
        given = {k for k, v in w.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        missing = used - given - derived.keys()
        assert not missing, f"{task.id} workload {w.name}: the roofline uses {sorted(missing)}, which it does not give"
    nbytes, flops = roofline(task, cpu, derived)
    assert math.isfinite(nbytes) and nbytes > 0 and math.isfinite(flops) and flops >= 0
