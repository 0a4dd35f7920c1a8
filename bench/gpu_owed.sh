#!/usr/bin/env bash
# The GPU checks still owed, resumable across device calls on the same (warm) machine:
#
#   [RUN_TASKS=IDS] bash bench/gpu_owed.sh [SECONDS]        (default 560: the call's 600 s limit less packing)
#
# Each step that ran to its end (exit 0, or 1: a target missed) is marked done in $STATE (default /tmp/d2k-owed, which survives between calls while
# the machine stays warm) and skipped by the next call; a step cut off by its limit runs again next time.
# What bench/results/2026-12-04-h200-owed-9 left open, in order:
#   stability attention and muon as candidates after three changes: the baselines time the input sets that the
#             candidate holds (owed-9's qwen3_8b_b256_lvar fractions 0.988-1.038 came from timing set 0 against
#             the last set), long kernels get fewer calls per batch (muon's timing phase 14.2 s; predicted about
#             3 s less), and the checked calls report their stages (candidate.call.run, .late_writes, .sync,
#             .checks, .pack: where muon's 16 s of checked calls go)
#   quant     the column-major tile's knobs on the two large quant workloads (issue 3's 80% of copy bandwidth)
#   run       only with RUN_TASKS: issue 4's scripted/expert run again (its store kept in $STATE)
# Issue 3's kernel figures have their own call: bench/gpu_bench_session.sh.
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
STATE=${STATE:-/tmp/d2k-owed}
mkdir -p "$STATE"
once() {  # once NAME LIMIT COMMAND...: `step`, unless an earlier call finished it
  local name=$1
  if [ -e "$STATE/$name.done" ]; then echo "$name done in an earlier call" >> "$R/steps.txt"; return; fi
  step "$@"
  tail -n 1 "$R/steps.txt" | grep -Eq "^$name rc=(0|1) " && touch "$STATE/$name.done"  # ran to its end (1: a target missed)
}
once stability 260 python3 bench/evaluator_stability.py --repeats 2 --prestart --json "$R/stability.json" \
  --tasks attn_decode_paged_gqa,muon_newton_schulz
once quant 120 python3 bench/sweep.py quant_per_token_group_fp8 --workloads dsv3_m4096_k18432_col,dsv3_m16384_k7168_row \
  --set TILE_GROUPS=16,32,64 --set MAX_COL_GROUPS=1,2,4,8 --set MAX_WARPS=4,8 --reps 30 --json "$R/quant.json"
if [ -n "${RUN_TASKS:-}" ]; then
  once run 480 python3 -m d2kbench run --model scripted/expert --tasks "$RUN_TASKS" --configs none --out "$STATE/run"
  python3 -m d2kbench runs summary "$STATE/run" > "$R/run_summary.txt" 2>&1
  [ -d "$STATE/run" ] && mkdir -p "$R/run" && tar -C "$STATE/run" --exclude=./workspaces -cf - . 2>/dev/null | tar -C "$R/run" -xf -
fi
pack
