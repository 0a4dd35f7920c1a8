"""A static scan of a candidate's source: named findings, a few of them forbidden.

The scan resolves every name and attribute chain that starts at an imported module (`import os as
o; o.system` is `os.system`) and matches it against the rules below. A finding is `forbidden` when
an honest kernel file has no use for it at all (native code, subprocesses, network, signals,
threads, side streams, dynamic code, introspection of the interpreter, patching modules): those
fail the candidate with `integrity/forbidden_code`. The others (imports outside the allowlist, file
access, environment reads, `getattr` on a module) are only recorded. The dynamic checks (sandbox,
op guard, launch counting, the parent's comparisons) remain the defence: string tricks dodge any
static rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

from d2kbench.evaluate.result import Finding

ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "numpy", "math", "functools", "itertools", "operator", "typing", "dataclasses",
    "collections", "enum", "numbers", "abc", "__future__", "os", "sys", "warnings",
})

# (dotted-name prefix, code, forbidden, what it is)
RULES: tuple[tuple[str, str, bool, str], ...] = (
    ("ctypes", "native_code", True, "calls native code"),
    ("cffi", "native_code", True, "calls native code"),
    ("subprocess", "subprocess", True, "starts processes"),
    ("pty", "subprocess", True, "starts processes"),
    ("os.system", "subprocess", True, "starts processes"),
    ("os.popen", "subprocess", True, "starts processes"),
    ("os.exec", "subprocess", True, "replaces the process"),
    ("os.spawn", "subprocess", True, "starts processes"),
    ("os.posix_spawn", "subprocess", True, "starts processes"),
    ("os.fork", "subprocess", True, "forks the process"),
    ("socket", "network", True, "opens network sockets"),
    ("ssl", "network", True, "opens network connections"),
    ("http", "network", True, "opens network connections"),
    ("urllib", "network", True, "opens network connections"),
    ("requests", "network", True, "opens network connections"),
    ("os.kill", "process_control", True, "signals other processes"),
    ("os.killpg", "process_control", True, "signals other processes"),
    ("signal", "process_control", True, "handles or sends signals"),
    ("threading", "concurrency", True, "runs work in the background"),
    ("_thread", "concurrency", True, "runs work in the background"),
    ("multiprocessing", "concurrency", True, "runs work in other processes"),
    ("concurrent", "concurrency", True, "runs work in the background"),
    ("torch.cuda.Stream", "side_stream", True, "creates a side stream"),
    ("torch.cuda.ExternalStream", "side_stream", True, "uses a foreign stream"),
    ("torch.cuda.stream", "side_stream", True, "switches streams"),
    ("torch.cuda.set_stream", "side_stream", True, "switches streams"),
    ("torch.Stream", "side_stream", True, "creates a side stream"),
    ("importlib", "dynamic_code", True, "imports by name at run time"),
    ("builtins", "introspection", True, "reaches the builtins module"),
    ("gc", "introspection", True, "walks the interpreter's objects"),
    ("inspect", "introspection", True, "walks the interpreter's frames"),
    ("sys._getframe", "introspection", True, "walks the interpreter's frames"),
    ("sys.settrace", "introspection", True, "traces the interpreter"),
    ("sys.setprofile", "introspection", True, "traces the interpreter"),
    ("torch.profiler", "introspection", True, "drives the profiler that checks the call"),
    ("torch.autograd.profiler", "introspection", True, "drives the profiler that checks the call"),
    ("sys.modules", "monkeypatch", True, "reaches loaded modules by name"),
    ("os.environ", "env_read", False, "reads the environment"),
    ("os.getenv", "env_read", False, "reads the environment"),
    ("os.putenv", "env_read", False, "writes the environment"),
    ("io.open", "file_access", False, "opens a file"),
    ("os.open", "file_access", False, "opens a file"),
    ("os.listdir", "file_access", False, "lists a folder"),
    ("os.scandir", "file_access", False, "lists a folder"),
    ("os.walk", "file_access", False, "lists folders"),
    ("os.remove", "file_access", False, "deletes a file"),
    ("os.unlink", "file_access", False, "deletes a file"),
    ("shutil", "file_access", False, "copies or deletes files"),
    ("glob", "file_access", False, "lists folders"),
    ("pathlib", "file_access", False, "works with paths"),
    ("tempfile", "file_access", False, "creates files"),
    ("pickle", "file_access", False, "loads pickled objects"),
)
BUILTINS = {
    "eval": ("dynamic_code", True, "runs code from a string"),
    "exec": ("dynamic_code", True, "runs code from a string"),
    "compile": ("dynamic_code", True, "compiles code from a string"),
    "__import__": ("dynamic_code", True, "imports by name at run time"),
    "globals": ("introspection", True, "reaches module globals"),
    "vars": ("introspection", False, "reads an object's namespace"),
    "open": ("file_access", False, "opens a file"),
}
FRAME_ATTRIBUTES = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "__globals__", "__code__", "__closure__", "__subclasses__",
    "__builtins__", "gi_frame", "tb_frame",
})
PATH_METHODS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "rglob"})


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # local name -> the dotted module path it stands for
        self.findings: dict[tuple[str, int], Finding] = {}

    def add(self, code: str, line: int, forbidden: bool, message: str) -> None:
        self.findings.setdefault((code, line), Finding(code, line, message, forbidden))

    def check_name(self, dotted: str, line: int) -> bool:
        """Apply the rules to a resolved dotted name; True when one matched."""
        for prefix, code, forbidden, what in RULES:
            # a module matches itself and its members; `os.exec` matches execv, execve, ... too
            if dotted == prefix or dotted.startswith(prefix + ".") or ("." in prefix and dotted.startswith(prefix)):
                self.add(code, line, forbidden, f"`{dotted}` {what}")
                return True
        return False

    def resolve(self, node: ast.AST) -> str | None:
        """`a.b.c` as a dotted name rooted at an imported module, or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.modules:
            return ".".join([self.modules[node.id], *reversed(parts)])
        return None

    # -- imports --------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:  # import a.b as c: c is a.b
                self.modules[alias.asname] = alias.name
            else:  # import a.b: binds a
                self.modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
            self.check_import(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = "." * node.level + (node.module or "")
        for alias in node.names:
            dotted = f"{base}.{alias.name}" if base else alias.name
            self.modules[alias.asname or alias.name] = dotted
            if not self.check_name(dotted, node.lineno):
                self.check_import(base, node.lineno)

    def check_import(self, module: str, line: int) -> None:
        if self.check_name(module, line):
            return
        if module.startswith(".") or module.split(".")[0] not in ALLOWED_IMPORTS:
            self.add("import_outside_allowlist", line, False, f"imports `{module}`, outside the allowlist")

    # -- uses -----------------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self.resolve(node)
        if dotted:
            self.check_name(dotted, node.lineno)
        if node.attr in FRAME_ATTRIBUTES:
            self.add("introspection", node.lineno, True, f"`.{node.attr}` reaches the interpreter's internals")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.modules and isinstance(node.ctx, ast.Load):
            self.check_name(self.modules[node.id], node.lineno)
        elif node.id in BUILTINS and node.id not in self.modules:
            code, forbidden, what = BUILTINS[node.id]
            self.add(code, node.lineno, forbidden, f"`{node.id}` {what}")
        elif node.id == "__builtins__":
            self.add("introspection", node.lineno, True, "`__builtins__` reaches the builtins")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr", "getattr") and node.args:
            target = self.resolve(node.args[0])
            if target and func.id != "getattr":
                self.add("monkeypatch", node.lineno, True, f"`{func.id}` on the module `{target}`")
            elif target and not (len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
                self.add("dynamic_attribute", node.lineno, False, f"`getattr` on `{target}` with a computed name")
        if isinstance(func, ast.Attribute) and func.attr in PATH_METHODS:
            self.add("file_access", node.lineno, False, f"`.{func.attr}()` works with files")
        self.generic_visit(node)

    # -- assignments ----------------------------------------------------------------------------
    def check_target(self, target: ast.AST, line: int) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.check_target(element, line)
            return
        base = target.value if isinstance(target, (ast.Attribute, ast.Subscript)) else None
        dotted = self.resolve(base) if base is not None else None
        if dotted and dotted.startswith("os.environ"):
            return  # setting an environment variable: recorded as env_read, not a patch
        if isinstance(target, ast.Attribute) and dotted:
            self.add("monkeypatch", line, True, f"assigns `{dotted}.{target.attr}`")
        elif isinstance(target, ast.Subscript) and dotted:
            self.add("monkeypatch", line, True, f"assigns an item of `{dotted}`")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.check_target(target, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.check_target(target, node.lineno)
        self.generic_visit(node)


def scan_source(source: str) -> list[Finding]:
    """The findings in `source`, by line; none for source that does not parse (loading reports that)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    scanner = _Scanner()
    # Imports first, wherever they are, so that uses above a late import resolve too.
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            scanner.visit(node)
    scanner.visit(tree)
    return sorted(scanner.findings.values(), key=lambda f: (f.line, f.code))


def scan_file(path: Path) -> list[Finding]:
    return scan_source(path.read_text(errors="replace"))


def forbidden_summary(findings: list[Finding]) -> str | None:
    """One sentence naming the forbidden findings, or None when there are none."""
    bad = [f for f in findings if f.forbidden]
    if not bad:
        return None
    listed = "; ".join(f"line {f.line}: {f.message} ({f.code})" for f in bad[:5])
    more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
    return f"the source uses what no kernel file needs: {listed}{more}"
