# The knob sweeps owed to the device, sourced by bench/gpu_owed.sh: SWEEPS names each sweep's step as NAME, or
# NAME:KNOB,KNOB for a sweep that decides only those knobs (bench/pick_knobs.py), and run_sweeps runs their steps
# (`once NAME LIMIT python3 bench/sweep.py ... --json "$R/NAME.json"`) before the bench, which times the experts with
# the winners set. Decided sweeps leave this file (the twenty-sixth session's: bench/results/2026-12-06-owed-26 call1;
# the thirty-fourth's, on the H200: quant_flat_tiles, muon_tma, attn_four_programs and attn_warp_pages,
# bench/results/2026-12-06-owed-34 calls 1-2; the thirty-fifth's attn_first_chunk, on an H100: bench/results/
# 2026-12-06-h100-owed-35 call1; the thirty-sixth's attn_tile_loop on an H100, bench/results/2026-12-07-h100-owed-36
# calls 1 and 4, whose decision the H200 checks below; the thirty-ninth's muon_self_diagonal on an H100,
# bench/results/2026-12-07-h100-owed-39 call1, kept below for the H200's own decision; the fortieth's attn_rounds_merge on
# an H100, bench/results/2026-12-07-h100-owed-40 call1: neither knob kept; the forty-first's on an H100,
# bench/results/2026-12-07-h100-owed-41: SYM_PERSISTENT (call1) and SYM_TMA_STORE (call2) not kept, SYM_EXACT_GRID
# kept below for the H200's own decision).
SWEEPS=(muon_exact_grid attn_swap_paths muon_self_diagonal muon_store_once attn_pdl)
run_sweeps() {
  # muon's symmetric launches with one program a tile (SYM_EXACT_GRID: the batch's band launches lose 6 of 21
  # programs a matrix, 768 empty of 2688; 4096's 14%, 8192's wide launch 8%), every scored workload, twenty rounds of
  # ten calls a batch; on an H100 the batch 1.6% faster, inside the spread (bench/results/2026-12-07-h100-owed-41
  # call1): the H200's own decision
  once muon_exact_grid 300 python3 bench/sweep.py muon_newton_schulz --set SYM_EXACT_GRID=False,True \
    --rounds 20 --reps 10 --json "$R/muon_exact_grid.json"
  # attention's transposed tiles (wgmma) on the static splits only, as the H100 shipped them, against none and
  # every path, on every scored workload, ten rounds: the H200's own decision
  once attn_swap_paths 200 python3 bench/sweep.py attn_decode_paged_gqa --set SWAP_AB_DOTS=static,none,all \
    --rounds 10 --json "$R/attn_swap_paths.json"
  # muon's diagonal tiles of the Gram and A A products from one panel (SYM_SELF_DIAGONAL, shipped on from an H100:
  # the batch 2.0% faster, bench/results/2026-12-07-h100-owed-39 call1; the H200's own decision): the workloads
  # whose symmetric products take band tiles (8192x28672's wide tiles have no square diagonal tile), twenty rounds of
  # ten calls a batch (pick_knobs' paired rule; muon_tma's limits, owed-33)
  once muon_self_diagonal 240 python3 bench/sweep.py muon_newton_schulz --set SYM_SELF_DIAGONAL=False,True \
    --rounds 20 --reps 10 \
    --workloads qwen3_30b_a3b_experts_128x768x2048,llama3_8b_down_4096x14336,llama3_8b_attn_4096x4096 \
    --json "$R/muon_self_diagonal.json"
  # muon's symmetric results stored once, on and above the diagonal of pairs of 128-row blocks, their consumers
  # reading the rest through the transposed view (SYM_STORE_ONCE: the mirror is 10% of a batch band launch on an
  # H100, bench/results/2026-12-07-h100-owed-41 call1), every scored workload, twenty rounds of ten calls a batch; on an
  # H100 the batch unchanged, 4096x14336 2.2% faster, 8192x28672 0.7% slower (owed-42 call1): the H200's own decision
  once muon_store_once 300 python3 bench/sweep.py muon_newton_schulz --set SYM_STORE_ONCE=False,True \
    --rounds 20 --reps 10 --json "$R/muon_store_once.json"
  # attention's merge as a programmatic dependent of the split kernel (MERGE_PDL), timed on the H200 only in owed-22,
  # against the 264-split grid of 2.7 waves; against the dynamic one-wave grid on an H100 the 128k sequence 1.7 us
  # faster in 20 of 20 rounds, llama3_8b 1.8 us (bench/results/2026-12-07-h100-owed-44 call2), shipped on: the H200's
  # own decision, on the three workloads that merge, twenty rounds
  once attn_pdl 200 python3 bench/sweep.py attn_decode_paged_gqa --set MERGE_PDL=False,True --rounds 20 \
    --workloads llama3_8b_b64_l4k,llama3_70b_b16_l32k,qwen3_235b_a22b_b1_l128k --json "$R/attn_pdl.json"
}
