"""D2K-Bench: a benchmark of LLM agents turning expert GPU-kernel designs into Triton kernels."""

__version__ = "0.1.0"
