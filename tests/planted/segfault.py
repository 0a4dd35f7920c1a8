"""Planted: the process dies of SIGSEGV inside run()."""
import os
import signal


def run(x, y, alpha):
    os.kill(os.getpid(), signal.SIGSEGV)
