"""Planted: raises inside run()."""


def run(x, y, alpha):
    raise RuntimeError("planted failure")
