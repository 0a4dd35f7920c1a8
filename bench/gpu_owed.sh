#!/usr/bin/env bash
# The GPU regression checks, resumable across device calls on the same (warm) machine:
#
#   [REPEATS=N] [RUN_TASKS=IDS] [ONLY="STEP ..."] bash bench/gpu_owed.sh [SECONDS]   (default 560: the call's 600 s limit less packing)
#
# ONLY runs just the named steps (in this file's order), for a call that must put some steps first.
# Each step that ran to its end (exit 0, or 1: a target missed) is marked done in $STATE (default /tmp/d2k-owed, which survives between calls while
# the machine stays warm) and skipped by the next call; a step cut off by its limit runs again next time.
# The checks to run again after any change to the evaluator or an expert, the owed ones first: the knob sweeps of
# bench/sweeps.sh, whose winners pick_knobs sets (below), then bench: every expert under `d2k suite bench`, issue 3's
# kernel targets judged from it into targets.md;
# ncu_*: the profiles of the missed targets; quant_m8_process*: M=8 against torch.compile, one process each;
# memcheck_*: compute-sanitizer over every expert's scored and hidden workloads; racecheck_*: over the hidden ones;
# latency_floor: M=8 against the floor of its traffic;
# planted: owed since the fifteenth session's op-guard warm-up; moe: its one-thread custom check; worker_start: the bytecode cache;
# attention: its lengths drawn by strata.
#   fresh_*   every task's expert $REPEATS times warm (default 10, issue 3's count; balanced orders, six rounds of
#             50 ms batches): every verdict a pass, fractions of expert near 1 (issue 3's band: 1.00 +- 0.03), the
#             speedup's spread within 2% for kernels of 50 us or more, warm evaluations within 20 s; for the latency-bound workloads
#             the replay sets' first replays (`replay-set slowdown`, `fresh_replays` in the json), judged as the
#             events batches' first calls are (FRESH_SLOWDOWN)
#   planted   the planted candidates keep their verdicts (gpu_content_cache.py integrity/input_cache), and
#             gpu_graph_content_cache.py (a device-side cache in the graph) input_cache from its replay sets
#   worker_start  a worker's imports without bytecode and from the cache, cold evaluations before and after
#   ablations_*  each task's judge-calibration ablations against its expert, two evaluations each: the slowdowns
#             rubric.toml's h200_cost quotes (bench/ablation_costs.py)
#   run       only with RUN_TASKS: issue 4's scripted/expert run (its store kept in $STATE)
# bench/gpu_bench_session.sh runs the same bench and targets in a call of their own, without the rest.
set -uo pipefail
budget=${1:-560}
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/sweeps.sh"
STATE=${STATE:-/tmp/d2k-owed}
mkdir -p "$STATE"
once() {  # once NAME LIMIT COMMAND...: `step`, unless an earlier call finished it
  local name=$1
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  if [ -e "$STATE/$name.done" ]; then echo "$name done in an earlier call" >> "$R/steps.txt"; return; fi
  step "$@"
  tail -n 1 "$R/steps.txt" | grep -Eq "^$name rc=(0|1) " && touch "$STATE/$name.done"  # ran to its end (1: a target missed)
  # a sweep's file, for pick_knobs in this call and later ones (one cut off by its limit is marked incomplete:
  # pick_knobs decides nothing from it, and the next call runs the step again)
  [ -e "$R/$name.json" ] && cp "$R/$name.json" "$STATE/"
}
# The knobs the finished sweeps decide (bench/pick_knobs.py, the perf notes' rule), written into this call's copy of
# the tree before anything times an expert: the device copies the committed tree afresh on every call, so each call
# applies them again (the same files give the same decisions). knobs.md says why, knobs.diff what changed; the
# results' README records the tree as its commit plus that diff. Sweeps whose decisions are committed leave this
# file (the twenty-second session's: bench/results/2026-12-05-h200-owed-22 call1; the twenty-third's, on an H100:
# bench/results/2026-12-05-h100-owed-23 call1, all but quant_small_grid, which the H200 has yet to decide; the
# twenty-fourth's: attn_guided on both GPUs and muon_plan on the H100, bench/results/2026-12-05-owed-24; the
# twenty-fifth's: quant_small_grid, quant_min_warps, quant_reciprocal and attn_heads on the H200,
# bench/results/2026-12-05-owed-25 calls 1 and 2; the twenty-sixth's: attn_waves, attn_pairs and quant_scale_product
# on the H200, bench/results/2026-12-06-owed-26 call1; the thirty-fourth's: quant_flat_tiles, muon_tma, attn_four_programs and
# attn_warp_pages on the H200, bench/results/2026-12-06-owed-34 calls 1-2).
PRISTINE=$(mktemp -d)
cp -r src/d2kbench/tasks "$PRISTINE/"
pick_knobs() {
  local specs=() spec name
  for spec in ${SWEEPS[@]+"${SWEEPS[@]}"}; do
    name=${spec%%:*}
    [ -e "$STATE/$name.json" ] && specs+=("$STATE/$name.json${spec#"$name"}")
  done
  [ ${#specs[@]} -eq 0 ] && return
  # from the committed experts each time, so that knobs.md and knobs.diff hold every decision, not the last pick's
  cp -r "$PRISTINE/tasks/." src/d2kbench/tasks/
  python3 bench/pick_knobs.py "${specs[@]}" --apply --markdown "$R/knobs.md" --diff "$R/knobs.diff" > "$R/knobs.log" 2>&1
}
pick_knobs
run_sweeps
pick_knobs
once bench 320 python3 -m d2kbench suite bench --out "$R/bench"
[ -e "$R/bench/bench.json" ] && python3 bench/expert_targets.py "$R/bench/bench.json" --markdown "$R/targets.md" \
  > /dev/null 2>&1
# Attention's four scored workloads, expert against SDPA and the copy rate, in one process: its figures where the
# suite bench cannot give them (on an 80 GB card attention's evaluation runs out of memory: docs/perf/evaluator.md).
once attn_sweep 90 python3 bench/sweep.py attn_decode_paged_gqa --rounds 6 --json "$R/attn_sweep.json"
# The sum-only stream of the 128k sequence's pages again, with the cases that tell what holds one KV head a program at
# 85% of the copy rate where two reach 97% (owed-25): a load's run, the program's footprint, evict_first, the launch.
once attn_stream_more 150 python3 bench/diag/attn_one_wave.py --parts stream_more --reps 30 \
  --json "$R/attn_stream_more.json"
# The profiles behind the targets the committed runs miss (issue 3 asks for them in the note); the 128k sequence's and
# quant's column-major ones are committed (owed-22).
NCU="ncu --profile-from-start off --set full"
# Where the attention's time goes between its two kernels at the GPU's own clocks (ncu's --clock-control none; the
# profiles above lock the SM clock at base): each kernel's duration, for the 128k sequence and llama3_8b (ncu runs
# them apart, each from a flushed cache: their sum ran 2.6 us above the Timer's time of both on an H100, owed-35).
for w in qwen3_235b_a22b_b1_l128k llama3_8b_b64_l4k; do
  once "ncu_attn_times_$w" 60 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
    python3 bench/ncu_target.py attn_decode_paged_gqa "$w"
done
# The 128k sequence's sum-only stream at the expert's launch (96% of copy on an H100, owed-35) beside its split kernel
# (88%), both under the full set at locked clocks: the stall reasons, issue rate and occupancy the loop adds.
once ncu_attn_stream 90 $NCU -k regex:_stream_kernel python3 bench/diag/attn_one_wave.py --parts ncu_stream --reps 3
once ncu_attn_split 90 $NCU -k regex:_decode_split_kernel python3 bench/ncu_target.py attn_decode_paged_gqa \
  qwen3_235b_a22b_b1_l128k
# quant's M=8 with the knobs picked above (owed-25 call1 has the comparator's kernel and the two-warp expert's before
# the reciprocal).
once ncu_quant_m8 60 $NCU -k regex:_quant_group_fp8_kernel python3 bench/ncu_target.py quant_per_token_group_fp8 \
  dsv3_m8_k7168_row
# muon's batch (2x missed by 6.1% on the H200, owed-34): three of its K = 768 symmetric products (the Gram product
# skipped), as shipped (the fourteenth session's profile, owed-18 call5, was of kernels since replaced).
once ncu_muon_batch 150 $NCU -k regex:_sym_gemm_kernel --launch-skip 1 --launch-count 3 \
  python3 bench/ncu_target.py muon_newton_schulz qwen3_30b_a3b_experts_128x768x2048
# quant's M=8 against the compiled comparator (issue 3: faster), a 5 us graph replay whose medians move by 3-7%
# from process to process (docs/perf/evaluator.md): one process per step, six of them, so the note can give the
# ratio's median and range over processes instead of one suite bench's draw.
for i in 1 2 3 4 5 6; do
  once "quant_m8_process$i" 60 python3 bench/sweep.py quant_per_token_group_fp8 --workloads dsv3_m8_k7168_row \
    --reps 200 --rounds 6 --json "$R/quant_m8_process$i.json"
done
# M=8 against the floor of its own traffic under the harness's timing (an empty launch; one load and one dependent
# store at several grids): on the H100 both the expert and the comparator sit 4-7% above it
# (bench/results/2026-12-06-owed-28 calls 5-6); the step's log is its table.
once latency_floor 90 python3 bench/diag/latency_floor.py
# compute-sanitizer memcheck of every expert on every scored and hidden workload (the interpreter does not catch
# out-of-bounds accesses; the last full check was attention's alone, bench/results/2026-12-04-h200-sweep-16 call3):
# one call of each expert a workload, its outputs checked against the oracle; exit 9 on a memory error
for t in attn_decode_paged_gqa moe_align_block_size quant_per_token_group_fp8 muon_newton_schulz; do
  once "memcheck_$t" 240 compute-sanitizer --tool memcheck --error-exitcode 9 python3 bench/diag/memcheck_expert.py "$t"
done
# racecheck (shared-memory hazards) of every expert on its hidden workloads, the small ones; the oracle on the CPU,
# since the tool flags torch's own reduction kernels (bench/results/2026-12-07-h100-owed-39 call7)
for t in attn_decode_paged_gqa moe_align_block_size quant_per_token_group_fp8 muon_newton_schulz; do
  once "racecheck_$t" 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 \
    python3 bench/diag/memcheck_expert.py "$t" --splits hidden --oracle-cpu
done
# muon's TMA kernel in one worker after other workloads, four evaluations: the check its warp-specialized form failed
# (bench/results/2026-12-06-owed-30 calls 4-17); the shipped, flattened form must pass every one
once muon_race 150 bash bench/diag/muon_tma_race.sh 4
once planted 120 python3 bench/gpu_integrity.py --tasks '' --json "$R/planted.json" --planted \
  gpu_content_cache.py,gpu_content_cache_lookahead.py,timed_pointer_cache.py,gpu_graph_cached.py,gpu_timer_halved.py,\
gpu_graph_content_cache.py
REPEATS=${REPEATS:-10}
once fresh_moe_align_block_size 300 python3 bench/evaluator_stability.py --repeats "$REPEATS" --prestart \
  --tasks moe_align_block_size --json "$R/fresh_moe_align_block_size.json"
once worker_start 150 python3 bench/diag/worker_start.py --task quant_per_token_group_fp8
for t in attn_decode_paged_gqa muon_newton_schulz; do
  once "fresh_$t" 260 python3 bench/evaluator_stability.py --repeats "$REPEATS" --prestart --tasks "$t" \
    --json "$R/fresh_$t.json"
done
once fresh_quant_per_token_group_fp8 220 python3 bench/evaluator_stability.py --repeats "$REPEATS" --prestart \
  --tasks quant_per_token_group_fp8 --json "$R/fresh_quant_per_token_group_fp8.json"
# what each judge-calibration ablation costs the current experts (rubric.toml's h200_cost; docs/judge.md), two
# evaluations each, a task a step
for t in attn_decode_paged_gqa moe_align_block_size quant_per_token_group_fp8 muon_newton_schulz; do
  once "ablations_$t" 200 python3 bench/ablation_costs.py --tasks "$t" --repeats 2 --json "$R/ablations_$t.json" \
    --markdown "$R/ablations_$t.md"
done
if [ -n "${RUN_TASKS:-}" ]; then
  once run 480 python3 -m d2kbench run --model scripted/expert --tasks "$RUN_TASKS" --configs none --out "$STATE/run"
  python3 -m d2kbench runs summary "$STATE/run" > "$R/run_summary.txt" 2>&1
  [ -d "$STATE/run" ] && mkdir -p "$R/run" && tar -C "$STATE/run" --exclude=./workspaces -cf - . 2>/dev/null | tar -C "$R/run" -xf -
fi
pack
