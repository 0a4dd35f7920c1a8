"""How fast a GPU tensor reaches a spool file (the evaluator's input sets) and back, by several routes.

    PYTHONPATH=src python3 bench/diag/spool_write.py [--mib 1024]

Routes: the evaluator's current one (copy_ from the GPU into a fresh memory-mapped file), the same after
`posix_fallocate`, a pinned staging buffer in chunks then `os.write`, and `.cpu()` then `os.write`;
back to the device: the current `np.fromfile` then `.to(device)`, and a copy-on-write map then `.to`.
Prints GB/s for each, twice (the first pass pays for first-use costs).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path

import numpy as np
import torch

from d2kbench.evaluate.channel import spool_root

CHUNK = 64 << 20


def mapped(flat: torch.Tensor, path: Path, preallocate: bool) -> None:
    if preallocate:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.posix_fallocate(fd, 0, flat.numel())
        os.close(fd)
    m = np.memmap(path, dtype=np.uint8, mode="r+" if preallocate else "w+", shape=(flat.numel(),))
    torch.from_numpy(m).copy_(flat)
    m.flush()
    del m


def pinned_chunks(flat: torch.Tensor, path: Path, staging: torch.Tensor) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for start in range(0, flat.numel(), CHUNK):
            part = flat[start:start + CHUNK]
            staging[:part.numel()].copy_(part)  # synchronous: pinned destination, full DMA speed
            view = memoryview(staging[:part.numel()].numpy())
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def via_cpu(flat: torch.Tensor, path: Path) -> None:
    with open(path, "wb") as f:
        f.write(memoryview(flat.cpu().numpy()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    flat = torch.randint(0, 255, (args.mib << 20,), dtype=torch.uint8, device=device)
    staging = torch.empty(CHUNK, dtype=torch.uint8, pin_memory=device == "cuda")
    routes = {
        "memmap copy_ (current)": lambda p: mapped(flat, p, False),
        "fallocate + memmap copy_": lambda p: mapped(flat, p, True),
        "pinned 64 MiB chunks + os.write": lambda p: pinned_chunks(flat, p, staging),
        ".cpu() + write": lambda p: via_cpu(flat, p),
    }
    reads = {
        "read: fromfile + .to (current)": lambda p: torch.from_numpy(np.fromfile(p, dtype=np.uint8)).to(device),
        "read: memmap (copy-on-write) + .to": lambda p: torch.from_numpy(
            np.memmap(p, dtype=np.uint8, mode="c", shape=(flat.numel(),))).to(device),
    }
    for rep in range(2):
        source = spool_root() / f"d2k-spool-bench-{uuid.uuid4().hex}"
        mapped(flat, source, False)
        for label, read in reads.items():
            start = time.perf_counter()
            back = read(source)
            if device == "cuda":
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            assert back.numel() == flat.numel()
            del back
            print(f"pass {rep}: {label}: {flat.numel() / elapsed / 1e9:.2f} GB/s", flush=True)
        source.unlink()
        for label, route in routes.items():
            path = spool_root() / f"d2k-spool-bench-{uuid.uuid4().hex}"
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            route(path)
            elapsed = time.perf_counter() - start
            assert path.stat().st_size == flat.numel()
            path.unlink()
            print(f"pass {rep}: {label}: {flat.numel() / elapsed / 1e9:.2f} GB/s", flush=True)


if __name__ == "__main__":
    main()
