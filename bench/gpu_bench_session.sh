#!/usr/bin/env bash
# One device call for issue 3's figures, each step under its own limit, packed into $OUT/results.tgz:
#
#   bash bench/gpu_bench_session.sh [SECONDS]        (default 560)
#
# Steps: `d2k suite bench` (every expert timed against the reference
# and the comparator, each output's error against the oracle beside the reference's), issue 3's targets judged
# from it (bench/expert_targets.py), then the attention
# and muon experts evaluated as candidates twice (the second with a warm compile cache) for the evaluator's
# wall time and its fraction-of-expert stability.
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
step bench 330 python3 -m d2kbench suite bench --out "$R/bench"
step targets 30 python3 bench/expert_targets.py "$R/bench/bench.json" --markdown "$R/targets.md"
step stability 220 python3 bench/evaluator_stability.py --tasks attn_decode_paged_gqa,muon_newton_schulz \
  --repeats 2 --json "$R/stability.json"
pack
