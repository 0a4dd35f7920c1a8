"""Planted: reads the evaluator's bytecode of torch (allowed), then plants a file beside it, where the trusted
worker would load it (refused: the folder is the evaluator's)."""
import sys
from pathlib import Path

import torch


def run(x, y, alpha):
    assert sys.pycache_prefix, "this worker was started without the bytecode cache"
    Path(torch.__spec__.cached).read_bytes()  # readable: FileNotFoundError or PermissionError here would say so
    (Path(sys.pycache_prefix) / "planted_bytecode.pyc").write_bytes(b"written by a candidate")
    raise RuntimeError("wrote into the evaluator's bytecode cache")
