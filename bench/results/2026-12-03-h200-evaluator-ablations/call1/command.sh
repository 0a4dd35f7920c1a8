#!/usr/bin/env bash
# Device call 1 of 2026-12-03 (second session): suite check, scripted/expert run, ablation slowdowns, ncu.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
inner() {
  SECONDS=0
  OUT=$R/check timeout 260 bash bench/gpu_suite.sh check > $R/check_console.log 2>&1; echo "check rc=$? ${SECONDS}s" >> $R/steps.txt
  timeout 200 python3 -m d2kbench run --model scripted/expert --tasks all --configs none --out $R/run > $R/run.log 2>&1; echo "run rc=$? ${SECONDS}s" >> $R/steps.txt
  python3 -m d2kbench runs summary $R/run >> $R/run.log 2>&1
  for a in src/d2kbench/tasks/*/*/ablations/*.py; do
    t=$(basename $(dirname $(dirname $a))); n=$(basename $a .py)
    timeout 90 python3 -m d2kbench eval $t $a --json > $R/abl_${t}_${n}.json 2> $R/abl_${t}_${n}.err; echo "abl $t $n rc=$? ${SECONDS}s" >> $R/steps.txt
  done
  for spec in "attn_decode_paged_gqa llama3_8b_b64_l4k" "attn_decode_paged_gqa llama3_8b_b64_l4k --comparator" "quant_per_token_group_fp8 dsv3_m4096_k18432_col"; do
    set -- $spec; tag=$(echo "$spec" | tr ' ' '_' | tr -d '-')
    timeout 120 ncu --profile-from-start off --set full --import-source no -o $R/ncu_$tag python3 bench/ncu_target.py $spec > $R/ncu_$tag.log 2>&1
    ncu --import $R/ncu_$tag.ncu-rep --page details > $R/ncu_$tag.txt 2>&1; echo "ncu $tag ${SECONDS}s" >> $R/steps.txt
  done
}
export -f inner; export R
timeout 555 bash -c inner
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
cd $OUT && tar czf results.tgz r && rm -rf r
