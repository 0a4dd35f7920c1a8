# Sourced by the one-call GPU session scripts: `step NAME LIMIT_S COMMAND...` runs a step under its own limit
# within the session's budget (seconds, $budget), logs it to $R/NAME.log and its exit code (124: its limit)
# and the seconds elapsed to $R/steps.txt; `pack` puts everything into $OUT/results.tgz (the device returns
# at most 8 files).
# The hash of the sources a call ran (src/ and bench/ code and task files, results left out): the device copies the
# working tree but its .git may lag it, so the commit it names can be older than the code; `bash bench/steps.sh
# --sources` here prints the same hash for this checkout.
sources_hash() {
  find src/d2kbench bench -type f \( -name '*.py' -o -name '*.toml' -o -name '*.md' -o -name '*.sh' \) \
    -not -path '*/__pycache__/*' -not -path 'bench/results/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
}
if [ "${1:-}" = "--sources" ]; then sources_hash; exit 0; fi
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-out}
R=$out/r
mkdir -p "$R"
step() {
  local name=$1 limit=$2; shift 2
  local left=$((budget - SECONDS))
  if [ "$left" -lt 20 ]; then echo "$name skipped (no time left) ${SECONDS}s" >> "$R/steps.txt"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? ${SECONDS}s" >> "$R/steps.txt"
}
pack() {
  (cd "$out" && tar czf results.tgz r && rm -rf r)
}
SECONDS=0
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "command: bash $0 $*; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown) (the device's .git may lag); sources $(sources_hash)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
} > "$R/env.txt" 2>&1
