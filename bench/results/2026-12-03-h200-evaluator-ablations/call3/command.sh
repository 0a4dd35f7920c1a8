#!/usr/bin/env bash
# Device call 3 (last, ~250 s): quant check with hidden workloads, GPU integrity subset, attention/muon ablations on a few workloads.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
inner() {
  SECONDS=0
  OUT=$R/check timeout 60 bash bench/gpu_suite.sh check quant_per_token_group_fp8 > $R/check_console.log 2>&1; echo "check rc=$? ${SECONDS}s" >> $R/steps.txt
  timeout 110 python3 bench/gpu_integrity.py --planted deferred_thread.py,timed_pointer_cache.py,mutates_input.py,stale_by_address.py --json $R/integrity.json > $R/integrity.log 2>&1; echo "integrity rc=$? ${SECONDS}s" >> $R/steps.txt
  for spec in "attn_decode_paged_gqa exp2_with_log2e_folded llama3_8b_b64_l4k,qwen3_235b_a22b_b1_l128k" "attn_decode_paged_gqa pipelined_kv_loads llama3_8b_b64_l4k,qwen3_235b_a22b_b1_l128k" "muon_newton_schulz upper_triangle_tiles_mirrored llama3_8b_attn_4096x4096" "muon_newton_schulz grouped_tile_order llama3_8b_attn_4096x4096"; do
    set -- $spec; a=$(ls src/d2kbench/tasks/*/$1/ablations/$2.py)
    timeout 40 python3 -m d2kbench eval $1 $a --workloads $3 --json > $R/abl_$1_$2.json 2> $R/abl_$1_$2.err; echo "abl $1 $2 rc=$? ${SECONDS}s" >> $R/steps.txt
  done
}
export -f inner; export R
timeout 255 bash -c inner
cd $OUT && tar czf results.tgz r && rm -rf r
