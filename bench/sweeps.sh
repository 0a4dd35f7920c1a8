# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. None are owed: the twenty-sixth session's (attn_waves, attn_pairs, quant_scale_product) are
# decided in bench/results/2026-12-06-owed-26 call1.
SWEEPS=()
run_sweeps() { :; }
