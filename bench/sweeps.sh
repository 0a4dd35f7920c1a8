# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1).
SWEEPS=(quant_flat_tiles:FLAT_TILES attn_tma_pages:TMA_PAGES,SPLIT_PROGRAMS_PER_SM)
run_sweeps() {
  # quant's one-group tiles addressed from the program id (M=8: a latency chain whose load waited on an integer
  # division), shipped on an H100's paired rounds (bench/results/2026-12-06-owed-27); the H200's: the tiles
  # without it must not win there. Only M=8 takes them, so only M=8 is timed, three input draws, the comparator beside.
  once quant_flat_tiles 150 python3 bench/sweep.py quant_per_token_group_fp8 --workloads dsv3_m8_k7168_row \
    --set FLAT_TILES=True,False --reps 200 --rounds 10 --seeds 7,8,9 --json "$R/quant_flat_tiles.json"
  # attention's K/V pages as TMA boxes (TMA_PAGES, built in the twenty-eighth session without a GPU): every scored
  # workload, the 128k sequence the one it is for; the others must not lose. Its split kernel compiles to 64-80
  # registers against 125-157 (sm_90, Triton 3.9 / 3.6): six to eight programs fit an SM where three did, so the
  # dynamic split's one wave is also tried at six a SM.
  once attn_tma_pages 240 python3 bench/sweep.py attn_decode_paged_gqa --set TMA_PAGES=False,True \
    --set SPLIT_PROGRAMS_PER_SM=3,6 --rounds 6 --json "$R/attn_tma_pages.json"
}
