#!/usr/bin/env bash
# Muon's TMA kernel (MM_TMA_WS) against the race that turned it off (bench/results/2026-12-06-owed-30 calls 4-14):
# 4096x4096 then 4096x14336 in one worker, the expert with the knob on. On the device's Triton 3.6 the second
# workload's output was NaN in every element (incorrect/nan); a Triton that fixes warp specialization's in-kernel
# descriptors (triton-lang/triton#8311) should pass here, several times, before the knob goes back on.
#   bash bench/diag/muon_tma_race.sh [REPEATS]      (on the GPU machine, from the repository root)
set -uo pipefail
export PYTHONPATH=src
variant=$(mktemp --suffix=.py)
sed 's/^MM_TMA_WS = False$/MM_TMA_WS = True/' src/d2kbench/tasks/optimizer/muon_newton_schulz/expert.py > "$variant"
grep -q '^MM_TMA_WS = True$' "$variant" || { echo "MM_TMA_WS = False not found in expert.py"; exit 2; }
for i in $(seq "${1:-3}"); do
  python3 -m d2kbench eval muon_newton_schulz "$variant" --no-time \
    --workloads llama3_8b_attn_4096x4096,llama3_8b_down_4096x14336,llama3_70b_down_8192x28672 | head -3
done
