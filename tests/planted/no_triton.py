"""Planted: copies an input and launches nothing."""
import torch


def run(x, y, alpha):
    return y.clone()
