"""Planted: never returns."""


def run(x, y, alpha):
    while True:
        pass
