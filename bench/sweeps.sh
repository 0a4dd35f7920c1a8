# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1).
SWEEPS=(quant_flat_tiles:FLAT_TILES muon_tma:MM_TMA attn_four_programs:DYNAMIC_FOUR_PROGRAMS attn_warp_pages:WARP_PAGES)
run_sweeps() {
  # quant's one-group tiles addressed from the program id (M=8: a latency chain whose load waited on an integer
  # division), shipped on an H100's paired rounds (bench/results/2026-12-06-owed-27); the H200's: the tiles
  # without it must not win there. Only M=8 takes them, so only M=8 is timed, three input draws, the comparator beside.
  once quant_flat_tiles 150 python3 bench/sweep.py quant_per_token_group_fp8 --workloads dsv3_m8_k7168_row \
    --set FLAT_TILES=True,False --reps 200 --rounds 10 --seeds 7,8,9 --json "$R/quant_flat_tiles.json"
  # muon's Q X products on the persistent TMA kernel, not specialized (shipped on an H100's ten rounds against an A/A
  # control, bench/results/2026-12-06-owed-31 call1), against the one-tile kernel: the workloads that take it, twenty
  # rounds (pick_knobs' paired rule). Ten calls a batch: at the default fifty, 8192x28672's rounds (reference,
  # comparator and two variants, about 10 s each on an H100) ran the step past its limit (owed-32 call2)
  once muon_tma 240 python3 bench/sweep.py muon_newton_schulz --set MM_TMA=True,False --rounds 20 --reps 10 \
    --workloads qwen3_30b_a3b_experts_128x768x2048,llama3_8b_down_4096x14336,llama3_70b_down_8192x28672 \
    --json "$R/muon_tma.json"
  # attention's dynamic wave at four programs an SM (two stages, 128 registers) against three (three stages): only
  # the 128k sequence takes that wave; two input draws of ten rounds, pooled for the pick's paired rule
  once attn_four_programs 120 python3 bench/sweep.py attn_decode_paged_gqa --workloads qwen3_235b_a22b_b1_l128k \
    --set DYNAMIC_FOUR_PROGRAMS=False,True --rounds 10 --seeds 7,8 --json "$R/attn_four_programs.json"
  # attention's pages shared out one a warp, each warp its own online softmax merged at the program's end, against the
  # column-split tiles: every scored workload takes it (16-token pages), six rounds
  once attn_warp_pages 150 python3 bench/sweep.py attn_decode_paged_gqa --set WARP_PAGES=False,True --rounds 6 \
    --json "$R/attn_warp_pages.json"
}
