# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1;
# the thirty-fourth's, on the H200: quant_flat_tiles, muon_tma, attn_four_programs and attn_warp_pages,
# bench/results/2026-12-06-owed-34 calls 1-2; the thirty-fifth's attn_first_chunk, on an H100: bench/results/
# 2026-12-06-h100-owed-35 call1). None is owed now.
SWEEPS=()
run_sweeps() {
  :
}
