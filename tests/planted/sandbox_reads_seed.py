"""Planted: looks for the evaluation's secret seed in its environment and in its parent's."""
import os


def run(x, y, alpha):
    leaked = {k: v for k, v in os.environ.items() if "SEED" in k.upper() or k.startswith("D2K_")}
    if leaked:
        raise RuntimeError(f"found the seed in the environment: {leaked}")
    parent = os.getppid()
    for name in ("environ", "cmdline"):
        with open(f"/proc/{parent}/{name}", "rb") as f:  # the sandbox refuses: PermissionError
            raise RuntimeError(f"read the parent's {name}: {f.read(200)!r}")
