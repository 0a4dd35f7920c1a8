#!/usr/bin/env bash
# One device call for the integrity and tooling checks still owed, each under its own limit, packed into
# $OUT/results.tgz (the device returns at most 8 files):
#
#   bash bench/gpu_session.sh [SECONDS]        (default 560: the call's 600 s limit less packing)
#
# Steps: the GPU integrity checks (planted candidates with the hidden workloads, the endless kernel first;
# then baseline sabotage vs the reference time), the ncu profile tool's self-check, and the evaluator's
# stability targets on the two fast tasks (every timed workload now also records its copy-probe shares).
# The other calls: bench/gpu_run_session.sh (issue 4's scripted/expert run) and bench/gpu_bench_session.sh.
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
step endless 90 python3 -X faulthandler bench/gpu_integrity.py --tasks "" --planted gpu_endless_kernel.py \
  --json "$R/endless.json"
step integrity 240 python3 bench/gpu_integrity.py --json "$R/integrity.json"
step ncu_profile_check 90 python3 bench/diag/ncu_profile_check.py
step stability 240 python3 bench/evaluator_stability.py --tasks moe_align_block_size,quant_per_token_group_fp8 \
  --repeats 3 --json "$R/stability.json"
step spool 30 python3 bench/diag/spool_write.py --mib 1024
pack
