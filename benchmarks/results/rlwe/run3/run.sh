#!/bin/bash
PY=/work/main/.venv/bin/python
export SECUREFL_DATA=/work/shared/datasets
out=/tmp/rlwe-bench/r4
run() { name=$1; code=$2; backend=$3; shift 3
  echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $name $code $backend" >> $out/log
  (cd $code && PYTHONPATH=$code $PY -m securefl.cli bench hamming "$@" --backend $backend --workers 1 --json $out/${name}_${backend}_$(basename $code).json > /dev/null 2>> $out/err)
}
run digits /work/main shade --n 675 --L 1024 --parties 5 --rounds 3
run digits /work/wt-rlwe rlwe --n 675 --L 1024 --parties 5
run n1000 /work/main shade --n 1000 --L 4096 --parties 2 --rounds 2
run n1000 /work/wt-rlwe rlwe --n 1000 --L 4096 --parties 2
run n5000 /work/wt-rlwe rlwe --n 5000 --L 4096 --parties 2
echo "$(date +%T) done" >> $out/log
