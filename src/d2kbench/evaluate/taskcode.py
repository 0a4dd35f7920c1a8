"""Task code that the parent itself runs: `reference.check()` for custom comparisons (trusted)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from d2kbench.suite import Task

_loaded: dict[str, ModuleType] = {}


def reference_module(task: Task) -> ModuleType:
    key = str(task.reference_path)
    if key not in _loaded:
        name = f"d2k_reference_{task.id}"
        spec = importlib.util.spec_from_file_location(name, task.reference_path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _loaded[key] = module
    return _loaded[key]
