#!/usr/bin/env bash
# Device call 2: suite check (phases), ablation slowdowns, scripted/expert run, GPU integrity, ncu profile tool check.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
inner() {
  SECONDS=0
  OUT=$R/check timeout 170 bash bench/gpu_suite.sh check > $R/check_console.log 2>&1; echo "check rc=$? ${SECONDS}s" >> $R/steps.txt
  for a in src/d2kbench/tasks/*/*/ablations/*.py; do
    t=$(basename $(dirname $(dirname $a))); n=$(basename $a .py)
    timeout 45 python3 -m d2kbench eval $t $a --json > $R/abl_${t}_${n}.json 2> $R/abl_${t}_${n}.err; echo "abl $t $n rc=$? ${SECONDS}s" >> $R/steps.txt
  done
  timeout 150 python3 bench/gpu_integrity.py --json $R/integrity.json > $R/integrity.log 2>&1; echo "integrity rc=$? ${SECONDS}s" >> $R/steps.txt
  timeout 150 python3 -m d2kbench run --model scripted/expert --tasks all --configs none --out $R/run > $R/run.log 2>&1; echo "run rc=$? ${SECONDS}s" >> $R/steps.txt
  python3 -m d2kbench runs summary $R/run >> $R/run.log 2>&1
  timeout 90 python3 bench/diag/ncu_profile_check.py > $R/ncu_profile_check.log 2>&1; echo "ncu_check rc=$? ${SECONDS}s" >> $R/steps.txt
}
export -f inner; export R
timeout 570 bash -c inner
rm -rf $R/run/workspaces
cd $OUT && tar czf results.tgz r && rm -rf r
