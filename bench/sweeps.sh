# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1;
# the thirty-fourth's, on the H200: quant_flat_tiles, muon_tma, attn_four_programs and attn_warp_pages,
# bench/results/2026-12-06-owed-34 calls 1-2).
SWEEPS=(attn_first_chunk:DYNAMIC_FIRST_CHUNK_BY_INDEX)
run_sweeps() {
  # attention's dynamic wave with each program's first chunk by its index instead of from the counter: only the 128k
  # sequence takes that wave; two input draws of ten rounds, pooled for the pick's paired rule
  once attn_first_chunk 120 python3 bench/sweep.py attn_decode_paged_gqa --workloads qwen3_235b_a22b_b1_l128k \
    --set DYNAMIC_FIRST_CHUNK_BY_INDEX=False,True --rounds 10 --seeds 7,8 --json "$R/attn_first_chunk.json"
}
