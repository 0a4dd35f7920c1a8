#!/usr/bin/env bash
# One device call for issue 4's GPU check: `scripted/expert` over the four tasks (config none), then the
# summary; the expert submitted as a candidate must reach a fraction of expert of 1.00 +- 0.03 everywhere.
#
#   bash bench/gpu_run_session.sh [SECONDS]        (default 560)
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
step run 520 python3 -m d2kbench run --model scripted/expert --tasks all --configs none --out "$R/run"
python3 -m d2kbench runs summary "$R/run" >> "$R/run.log" 2>&1
rm -rf "$R/run/workspaces"
pack
