"""The machine: versions, nameplate ceilings (the physical floor) and measured ceilings (cached)."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Vendor nameplate: (memory bandwidth B/s, dense bf16 FLOP/s). A time below the floor these give,
# by more than 10%, is physically impossible and is rejected.
NAMEPLATE = {
    "H200": (4.8e12, 989e12),
    "H100": (3.35e12, 989e12),
    "B200": (8.0e12, 2250e12),
}
MIN_NAMEPLATE_SHARE = 0.6  # an H200 copies at 4.2 TB/s (read + write) against its nameplate 4.8 TB/s
CACHE_DIR = Path.home() / ".cache" / "d2kbench"


def environment(device: str) -> dict[str, Any]:
    import triton

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "host": platform.node(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=props.name, sm=f"{props.major}{props.minor}", sms=props.multi_processor_count,
                   cuda=torch.version.cuda)
    return env


def nameplate_floor_s(gpu_name: str, nbytes: float, flops: float) -> float | None:
    """The fastest time the vendor's nameplate allows (fp8 work at twice the bf16 rate), or None."""
    for key, (bandwidth, peak) in NAMEPLATE.items():
        if key in gpu_name:
            return max(nbytes / bandwidth, flops / (2 * peak))
    return None


class SharedGpu(RuntimeError):
    """The GPU's ceilings measured far below its nameplate: something else was running on it."""


def ceilings(device: str, request: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, float]:
    """Copy bandwidth and bf16 GEMM rate measured on this GPU, measured once and cached per GPU. A copy rate
    below `MIN_NAMEPLATE_SHARE` of the nameplate bandwidth is never cached (`SharedGpu`): every contention
    check compares against it."""
    gpu = torch.cuda.get_device_properties(torch.device(device)).name
    path = CACHE_DIR / f"ceilings-{gpu.replace(' ', '_')}.json"
    if path.is_file():
        return json.loads(path.read_text())
    measured = request({"op": "ceilings"})["ceilings"]
    nameplate = next((bandwidth for key, (bandwidth, _) in NAMEPLATE.items() if key in gpu), None)
    if nameplate and measured["copy_bytes_per_s"] < MIN_NAMEPLATE_SHARE * nameplate:
        raise SharedGpu(f"the {gpu} copied at {measured['copy_bytes_per_s'] / 1e12:.2f} TB/s, below "
                        f"{MIN_NAMEPLATE_SHARE:.0%} of its nameplate {nameplate / 1e12:.1f} TB/s: it is shared")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measured))
    return measured
