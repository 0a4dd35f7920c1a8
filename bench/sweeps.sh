# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1;
# the thirty-fourth's, on the H200: quant_flat_tiles, muon_tma, attn_four_programs and attn_warp_pages,
# bench/results/2026-12-06-owed-34 calls 1-2; the thirty-fifth's attn_first_chunk, on an H100: bench/results/
# 2026-12-06-h100-owed-35 call1).
SWEEPS=(attn_tile_loop)
run_sweeps() {
  # attention's tile loop with less work around its loads (the thirty-sixth session; the expert's notes at
  # UNMASKED_TILES): whole tiles without masks, the denominator summed once a range, both dots transposed onto wgmma;
  # their cross product on every scored workload, ten rounds (the 128k sequence's 85% is missed by 2.3 points)
  once attn_tile_loop 300 python3 bench/sweep.py attn_decode_paged_gqa --set UNMASKED_TILES=False,True \
    --set DEFERRED_ROW_SUM=False,True --set SWAP_AB_DOTS=False,True --rounds 10 --json "$R/attn_tile_loop.json"
}
