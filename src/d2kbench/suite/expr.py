"""Safe arithmetic expressions over workload parameters (roofline formulas in task.toml)."""

from __future__ import annotations

import ast
import math
import operator

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
FUNCTIONS = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "log2": math.log2,
    "sqrt": math.sqrt,
}


class ExprError(ValueError):
    """An expression that does not parse or uses something other than arithmetic."""


def parse(text: str) -> ast.Expression:
    """Parse `text` and check that it holds only arithmetic, names and the allowed functions."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an expression: {text!r} ({exc.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                raise ExprError(f"only {sorted(FUNCTIONS)} may be called, in {text!r}")
        elif not isinstance(
            node,
            (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load)
            + tuple(_BINARY)
            + tuple(_UNARY),
        ):
            raise ExprError(f"{type(node).__name__} is not allowed in {text!r}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ExprError(f"only numbers are allowed as constants, in {text!r}")
    return tree


def names(text: str) -> set[str]:
    """The variable names an expression uses."""
    return {
        n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name) and n.id not in FUNCTIONS
    }


def evaluate(text: str, env: dict[str, float]) -> float:
    """Evaluate `text` with the names bound in `env`."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ExprError(f"unknown name {node.id!r} in {text!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call):
            return FUNCTIONS[node.func.id](*(ev(a) for a in node.args))
        raise ExprError(f"cannot evaluate {ast.dump(node)}")

    return float(ev(parse(text)))
