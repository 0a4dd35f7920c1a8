#!/usr/bin/env bash
# One device call that runs the GPU checks still owed, most important first, each under its own limit,
# and packs everything into $OUT/results.tgz (the device returns at most 8 files).
#
#   bash bench/gpu_session.sh [SECONDS]        (default 560: the call's 600 s limit less packing)
#
# Steps: the suite check (every expert on every workload, the kernel trace included), the GPU integrity
# checks (planted candidates, sabotage vs reference time), the scripted/expert pipeline on the two fast
# tasks, the ncu profile tool's self-check, and the evaluator's stability targets with what time is left.
# steps.txt records each step's exit code (124: its limit) and the seconds elapsed.
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
step check 240 python3 -m d2kbench suite check --out "$R/check"
step integrity 240 python3 bench/gpu_integrity.py --json "$R/integrity.json"
step run 200 python3 -m d2kbench run --model scripted/expert --tasks moe_align_block_size,quant_per_token_group_fp8 \
  --configs none --out "$R/run"
python3 -m d2kbench runs summary "$R/run" >> "$R/run.log" 2>&1
rm -rf "$R/run/workspaces"
step ncu_profile_check 120 python3 bench/diag/ncu_profile_check.py
step stability 300 python3 bench/evaluator_stability.py --tasks moe_align_block_size,quant_per_token_group_fp8 \
  --repeats 3 --json "$R/stability.json"
pack
