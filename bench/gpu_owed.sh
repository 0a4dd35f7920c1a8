#!/usr/bin/env bash
# The GPU checks still owed, resumable across device calls on the same (warm) machine:
#
#   [RUN_TASKS=IDS] bash bench/gpu_owed.sh [SECONDS]        (default 560: the call's 600 s limit less packing)
#
# Each step that ran to its end (exit 0, or 1: a target missed) is marked done in $STATE (default /tmp/d2k-owed, which survives between calls while
# the machine stays warm) and skipped by the next call; a step cut off by its limit runs again next time.
# What bench/results/2026-12-04-h200-owed-10 left open, in order:
#   first     where a candidate's first call on a workload goes (about 2 s on attention, 3.5 s on muon, with a
#             warm compile cache): bench/diag/first_call.py on muon and attention, a cold then a warm cache
#   quant     `d2k suite bench` of quant with the new tile (TILE_GROUPS 16, MAX_COL_GROUPS 2: 67.5 us, 80% of
#             copy, in owed-10's sweep), then the expert as a candidate (it must pass, fractions 1.00 +- 0.03)
#   stability muon once more (with the compile stage and the compile cache's file count), moe three times warm
#             (mixtral's fraction was 0.969 in owed-10's scripted run: the 13 us kernels' band)
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
once first 120 bash -c 'for t in muon_newton_schulz attn_decode_paged_gqa; do for i in 1 2; do
  python3 bench/diag/first_call.py $t --cache /tmp/d2k-first-$t; done; done'
once quant 120 bash -c "python3 -m d2kbench suite bench --tasks quant_per_token_group_fp8 --out $R/quant_bench &&
  python3 bench/evaluator_stability.py --repeats 2 --prestart --tasks quant_per_token_group_fp8"
once stability 240 bash -c "python3 bench/evaluator_stability.py --repeats 1 --prestart --tasks muon_newton_schulz &&
  python3 bench/evaluator_stability.py --repeats 3 --prestart --tasks moe_align_block_size"
if [ -n "${RUN_TASKS:-}" ]; then
  once run 480 python3 -m d2kbench run --model scripted/expert --tasks "$RUN_TASKS" --configs none --out "$STATE/run"
  python3 -m d2kbench runs summary "$STATE/run" > "$R/run_summary.txt" 2>&1
  [ -d "$STATE/run" ] && mkdir -p "$R/run" && tar -C "$STATE/run" --exclude=./workspaces -cf - . 2>/dev/null | tar -C "$R/run" -xf -
fi
pack
