"""Can a sandboxed candidate worker open the trusted side's GPU memory by legacy CUDA IPC, and how fast?

    PYTHONPATH=src python3 bench/diag/cuda_ipc_probe.py [--mib 1024]

The evaluator moves every input set through host files (GPU -> /dev/shm -> GPU, about 0.7 GB/s on the largest
attention workload). If a child under the candidate's sandbox (its own uid, network namespace, landlock) can
open a `cuIpcGetMemHandle` handle of the parent's allocation, input sets could go device to device instead.
The parent fills a tensor, hands its handle to two children (unconfined, then sandboxed); each opens it,
checks the bytes, times a device-to-device clone, and writes one byte (is the mapping writable?). Then a
sandboxed child keeps a mapping while the parent frees the block and allocates again, and writes through it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from d2kbench.evaluate.ipc import IpcHandle, RawPointer
from d2kbench.evaluate.ipc import check_result as check
from d2kbench.evaluate.ipc import require_driver as driver


def child(args: argparse.Namespace) -> None:
    report: dict = {"role": args.role}
    if args.plan:
        from d2kbench.evaluate import sandbox

        status = sandbox.enter(sandbox.Plan(**json.loads(Path(args.plan).read_text())))
        report["sandbox_active"] = status.get("active")
        report["sandbox_missing"] = status.get("missing")
    try:
        torch.empty(1, device="cuda")  # the primary context, current on this thread
        cuda = driver()
        handle = IpcHandle.from_buffer_copy(bytes.fromhex(args.handle))
        base = ctypes.c_uint64()
        start = time.perf_counter()
        opener = getattr(cuda, "cuIpcOpenMemHandle_v2", None) or cuda.cuIpcOpenMemHandle
        check(opener(ctypes.byref(base), handle, ctypes.c_uint(1)), "cuIpcOpenMemHandle")
        report["open_ms"] = (time.perf_counter() - start) * 1e3
        view = torch.as_tensor(RawPointer(base.value + args.offset, args.size), device="cuda")
        if args.hold:  # keep the mapping while the parent frees and reallocates, then write through it
            print(json.dumps({"opened": True}), flush=True)
            sys.stdin.readline()
            view.fill_(7)
            torch.cuda.synchronize()
            print(json.dumps({"written": True}), flush=True)
            return
        report["sum_matches"] = int(view[: 1 << 20].to(torch.int64).sum().item()) == args.checksum
        torch.cuda.synchronize()
        start = time.perf_counter()
        copy = view.clone()
        torch.cuda.synchronize()
        report["clone_gbps"] = args.size / (time.perf_counter() - start) / 1e9
        start = time.perf_counter()
        copy = view.clone()
        torch.cuda.synchronize()
        report["clone2_gbps"] = args.size / (time.perf_counter() - start) / 1e9
        view[0] = 7
        torch.cuda.synchronize()
        del view, copy
        check(cuda.cuIpcCloseMemHandle(base), "cuIpcCloseMemHandle")
        report["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the probe reports any failure
        report["ok"] = False
        report["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(report), flush=True)


def parent(args: argparse.Namespace) -> None:
    from d2kbench.evaluate.sandbox import Sandbox, SandboxSettings

    size = args.mib << 20
    pad = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # not at a block's start: tests the offset
    data = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
    data[0] = 1
    checksum = int(data[: 1 << 20].to(torch.int64).sum().item())
    cuda = driver()
    base, extent = ctypes.c_uint64(), ctypes.c_size_t()
    check(cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(extent), ctypes.c_uint64(data.data_ptr())),
          "cuMemGetAddressRange")
    handle = IpcHandle()
    check(cuda.cuIpcGetMemHandle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
    offset = data.data_ptr() - base.value
    print(f"parent: {args.mib} MiB at offset {offset} of a {extent.value >> 20} MiB block", flush=True)
    common = ["--handle", bytes(handle).hex(), "--offset", str(offset), "--size", str(size),
              "--checksum", str(checksum)]
    with tempfile.TemporaryDirectory(prefix="d2k-ipc-") as tmp:
        home, spool = Path(tmp) / "home", Path(tmp) / "spool"
        home.mkdir()
        spool.mkdir()
        box = Sandbox(SandboxSettings(), hidden=[], device="cuda:0")
        prefix = box.prepare(home, spool)
        plan = Path(tmp) / "plan.json"
        plan.write_text(prefix[3])
        plan.chmod(0o644)
        try:
            for role, extra in (("unconfined", []), ("sandboxed", ["--plan", str(plan)])):
                run = subprocess.run([sys.executable, __file__, "--child", "--role", role, *common, *extra],
                                     capture_output=True, text=True, timeout=120)
                print(run.stdout.strip() or f"{role}: no report, rc={run.returncode}", flush=True)
                if run.stderr.strip():
                    print(f"{role} stderr: {run.stderr.strip()[-800:]}", flush=True)
                torch.cuda.synchronize()
                print(f"after {role}: parent sees byte 0 = {int(data[0].item())} (7: the child's write landed)",
                      flush=True)
                data[0] = 1
            stale_mapping(cuda, [sys.executable, __file__, "--child", "--role", "sandboxed-hold", "--plan", str(plan),
                                 "--hold"])
        finally:
            box.release()
    del pad


def stale_mapping(cuda: ctypes.CDLL, command: list[str], size: int = 64 << 20) -> None:
    """The exporter frees a block a child still maps, allocates again, and the child writes through its old
    mapping: does the write reach the new block? (If not, an exported scratch copy may be freed as soon as the
    candidate has its own copy; if so, only when the candidate's process is gone.)"""
    first = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(first), ctypes.c_size_t(size)), "cuMemAlloc")
    torch.as_tensor(RawPointer(first.value, size), device="cuda").fill_(1)
    torch.cuda.synchronize()
    handle = IpcHandle()
    check(cuda.cuIpcGetMemHandle(ctypes.byref(handle), first), "cuIpcGetMemHandle")
    child = subprocess.Popen([*command, "--handle", bytes(handle).hex(), "--offset", "0", "--size", str(size),
                              "--checksum", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        opened = child.stdout.readline().strip()
        if '"opened"' not in opened:
            print(f"stale mapping: the child did not open the block: {opened or child.wait(30)}", flush=True)
            return
        check(cuda.cuMemFree_v2(first), "cuMemFree")
        second = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(second), ctypes.c_size_t(size)), "cuMemAlloc")
        fresh = torch.as_tensor(RawPointer(second.value, size), device="cuda")
        fresh.fill_(1)
        torch.cuda.synchronize()
        child.stdin.write("go\n")
        child.stdin.flush()
        written = child.stdout.readline().strip()
        child.wait(30)
        torch.cuda.synchronize()
        sevens = int((fresh == 7).sum().item())
        print(f"stale mapping: child {written or 'wrote nothing'}; new block at the same address: "
              f"{second.value == first.value}; bytes of the new block the child's write reached: {sevens} of {size}",
              flush=True)
        del fresh
        check(cuda.cuMemFree_v2(second), "cuMemFree")
    finally:
        if child.poll() is None:
            child.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--role", default="parent")
    parser.add_argument("--plan")
    parser.add_argument("--handle")
    parser.add_argument("--offset", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--checksum", type=int)
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    (child if args.child else parent)(args)


if __name__ == "__main__":
    main()
