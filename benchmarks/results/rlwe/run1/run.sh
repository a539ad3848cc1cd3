#!/bin/bash
# back-to-back: SHADE and LWE of main (today), LWE and RLWE of the ring-lwe branch
PY=/work/main/.venv/bin/python
export SECUREFL_DATA=/work/shared/datasets
out=/tmp/rlwe-bench
run() { # name codebase backend args...
  name=$1; code=$2; backend=$3; shift 3
  echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $name $code $backend" >> $out/log
  (cd $code && PYTHONPATH=$code $PY -m securefl.cli bench hamming "$@" --backend $backend --workers 1 --json $out/${name}_${backend}_$(basename $code).json > /dev/null 2>> $out/err)
}
for shape in "n1000 --n 1000 --L 4096 --parties 2" "digits --n 675 --L 1024 --parties 5" "n5000 --n 5000 --L 4096 --parties 2"; do
  set -- $shape; name=$1; shift
  run $name /work/main shade "$@"
  run $name /work/main lwe "$@"
  run $name /work/wt-rlwe lwe "$@"
  run $name /work/wt-rlwe rlwe "$@"
done
echo "$(date +%T) done" >> $out/log
