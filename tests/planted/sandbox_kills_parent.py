"""Planted: kills the evaluator (its worker's parent), dodging the static scan with getattr."""
import os

kill = getattr(os, "ki" + "ll")


def run(x, y, alpha):
    kill(os.getppid(), 9)
    raise RuntimeError("the parent survived a kill")
