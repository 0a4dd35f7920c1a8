"""Planted: copies an input and launches nothing."""


def run(x, y, alpha):
    return y.clone()
