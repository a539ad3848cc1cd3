#!/bin/bash
# Right after run.sh: the digits shape three more times each, old and new alternating (single runs are noisy at ~1.5 CPU s).
PY=/work/main/.venv/bin/python
export SECUREFL_DATA=/work/shared/datasets
out=/work/wt-rlwe/benchmarks/results/rlwe/run4
for i in 1 2 3; do
  for pair in old:/work/wt-rlwe-old new:/work/wt-rlwe; do
    tag=${pair%%:*}; code=${pair#*:}
    echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) bench digits $tag rep$i" >> $out/load_log.txt
    (cd $code && PYTHONPATH=$code timeout 300 $PY -m securefl bench hamming --n 675 --L 1024 --parties 5 \
       --backend rlwe --workers 1 --json $out/digits_rlwe_${tag}_rep$i.json > /dev/null 2>&1)
  done
done
echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) repeats done" >> $out/load_log.txt
