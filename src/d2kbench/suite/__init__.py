"""The task suite: task folders loaded into plain dataclasses. No GPU code here."""

from d2kbench.suite.loader import TASKS_ROOT, find_task, load_suite, load_task, roofline, task_dirs
from d2kbench.suite.schema import InputSpec, OutputSpec, RubricProperty, Task, TaskFormatError, Workload

__all__ = [
    "TASKS_ROOT",
    "InputSpec",
    "OutputSpec",
    "RubricProperty",
    "Task",
    "TaskFormatError",
    "Workload",
    "find_task",
    "load_suite",
    "load_task",
    "roofline",
    "task_dirs",
]
