#!/usr/bin/env bash
# Muon's persistent TMA kernel (MM_TMA) against the race that turned its warp-specialized form off
# (bench/results/2026-12-06-owed-30 calls 4-17): 4096x4096, 4096x14336 and 8192x28672 evaluated in one worker. With
# MM_TMA_WARP_SPECIALIZE=True on the device's Triton 3.6 the second and third outputs were NaN in every element
# (incorrect/nan) in one to five of every six evaluations; a Triton that fixes warp specialization's in-kernel
# descriptors (triton-lang/triton#8311) should pass here, many times, before that form goes back on.
#   bash bench/diag/muon_tma_race.sh [REPEATS [NAME=VALUE ...]]      (on the GPU machine, from the repository root)
# Each NAME=VALUE sets one of the expert's knobs in the evaluated copy (none: the shipped expert).
set -uo pipefail
export PYTHONPATH=src
repeats=${1:-3}
shift $(($# > 0 ? 1 : 0))
variant=$(mktemp --suffix=.py)
# the settings applied as bench/sweep.py's --set applies them (parse_value, variant_source: a knob assigned once)
python3 - "$variant" "$@" <<'PY' || exit 2
import sys
from pathlib import Path

sys.path.insert(0, "bench")
from sweep import parse_value, variant_source

knobs = {name: parse_value(value) for name, _, value in (s.partition("=") for s in sys.argv[2:])}
source = Path("src/d2kbench/tasks/optimizer/muon_newton_schulz/expert.py").read_text()
Path(sys.argv[1]).write_text(variant_source(source, knobs))
PY
for i in $(seq "$repeats"); do
  python3 -m d2kbench eval muon_newton_schulz "$variant" --no-time \
    --workloads llama3_8b_attn_4096x4096,llama3_8b_down_4096x14336,llama3_70b_down_8192x28672 | grep -v '^sandbox:'
done
