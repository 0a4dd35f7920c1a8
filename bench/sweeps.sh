# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1).
SWEEPS=(quant_flat_tiles:FLAT_TILES)
run_sweeps() {
  # quant's one-group tiles addressed from the program id (M=8: a latency chain whose load waited on an integer
  # division), shipped on an H100's paired rounds (bench/results/2026-12-06-owed-27); the H200's: the tiles
  # without it must not win there. Only M=8 takes them, so only M=8 is timed, three input draws, the comparator beside.
  once quant_flat_tiles 150 python3 bench/sweep.py quant_per_token_group_fp8 --workloads dsv3_m8_k7168_row \
    --set FLAT_TILES=True,False --reps 200 --rounds 10 --seeds 7,8,9 --json "$R/quant_flat_tiles.json"
}
