#!/usr/bin/env bash
# One device call for issue 3's figures, each step under its own limit, packed into $OUT/results.tgz:
#
#   bash bench/gpu_bench_session.sh [SECONDS]        (default 560)
#
# Steps: the attention expert over several input seeds in one process (the B=1 workload's run-to-run
# spread), the quant column-major tile width, `d2k suite bench` (every expert timed against the reference
# and the comparator, each output's error against the oracle beside the reference's), then the attention
# and muon experts evaluated as candidates twice (the second with a warm compile cache) for the evaluator's
# wall time and its fraction-of-expert stability.
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
step seeds 100 python3 bench/sweep.py attn_decode_paged_gqa --workloads qwen3_235b_a22b_b1_l128k,llama3_8b_b64_l4k \
  --seeds 1,2,3,1 --json "$R/seeds.json"
step quant_col 70 python3 bench/sweep.py quant_per_token_group_fp8 --workloads dsv3_m4096_k18432_col,dsv3_m16384_k7168_row \
  --set MAX_COL_GROUPS=1,2,4,8 --set TILE_GROUPS=32,64 --json "$R/quant_col.json"
step bench 300 python3 -m d2kbench suite bench --out "$R/bench"
step stability 300 python3 bench/evaluator_stability.py --tasks attn_decode_paged_gqa,muon_newton_schulz \
  --repeats 2 --json "$R/stability.json"
pack
