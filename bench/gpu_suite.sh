#!/usr/bin/env bash
# Run on the GPU machine (no pip, no network): `bash bench/gpu_suite.sh check|bench [task,...]`.
# Writes logs and JSON/Markdown under $OUT (or ./out), with the GPU, versions and date.
set -uo pipefail
mode=${1:-check}
tasks=${2:-}
out=${OUT:-out}
mkdir -p "$out"
export PYTHONPATH=src PYTHONUNBUFFERED=1
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "command: bash bench/gpu_suite.sh $*"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
} > "$out/env-$mode.txt" 2>&1
cat "$out/env-$mode.txt"
args=()
[ -n "$tasks" ] && args=(--tasks "$tasks")
python3 -m d2kbench suite "$mode" "${args[@]}" --out "$out/$mode" 2>&1 | tee "$out/$mode.log"
