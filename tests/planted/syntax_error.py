"""Planted: does not parse."""
def run(x, y, alpha) -> :
    return x
