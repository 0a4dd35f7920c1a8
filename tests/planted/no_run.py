"""Planted: defines no run()."""
def solve(x, y, alpha):
    return x
