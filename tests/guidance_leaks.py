"""What of an expert kernel must never appear in its task's guidance (prose only)."""

from __future__ import annotations

import ast
import re

from d2kbench.suite import Task

TUNING_KEYWORDS = {"num_warps", "num_stages", "num_ctas", "maxnreg"}


def _is_code_like(name: str) -> bool:
    return "_" in name.strip("_") or any(c.isupper() for c in name)


def expert_identifiers(source: str) -> set[str]:
    """Names in the expert that read as code: with an inner underscore or an uppercase letter."""
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
    return {n for n in found if _is_code_like(n) and len(n) > 2}


def tuning_values(source: str) -> set[int]:
    """Integers the expert gives to launch options, constexpr-style (uppercase) names or keywords."""
    tree = ast.parse(source)
    values = set()

    bound: dict[str, list[int]] = {}  # plain names assigned integer expressions (block = 64)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).extend(
                        n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and type(n.value) is int
                    )

    def ints(node: ast.AST) -> list[int]:
        out = []
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and type(n.value) is int:
                out.append(n.value)
            elif isinstance(n, ast.Name):
                out.extend(bound.get(n.id, []))
        return out

    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and (node.arg in TUNING_KEYWORDS or node.arg.isupper()):
            values.update(ints(node.value))
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and (t.id.isupper() or t.id in TUNING_KEYWORDS) for t in node.targets
        ):
            values.update(ints(node.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and (
                    key.value in TUNING_KEYWORDS or key.value.isupper()
                ):
                    values.update(ints(value))
    return values


def leaks(task: Task) -> list[str]:
    """Every expert identifier or tuning value found in guidance.md, and code fences."""
    guidance = (task.path / "guidance.md").read_text()
    source = task.expert_path.read_text()
    found = []
    if "```" in guidance:
        found.append("a code fence")
    for name in sorted(expert_identifiers(source)):
        if re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", guidance):
            found.append(f"identifier {name}")
    task_values = {v for w in task.workloads for v in w.params.values() if type(v) is int}
    for value in sorted(tuning_values(source) - task_values - {0, 1, 2}):
        if re.search(rf"(?<![\w.]){value}(?![\w.])", guidance):
            found.append(f"tuning value {value}")
    return found
