#!/bin/bash
# One run, back to back, of main b54ca06 (this branch carries no code change): where issue 23's goals stand.
PY=/work/main/.venv/bin/python
export SECUREFL_DATA=/work/shared/datasets
code=/work/wt-rlwe
out=$code/benchmarks/results/rlwe/run5
tmp=/tmp/rlwe-run5; mkdir -p $tmp
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
bench() { name=$1; backend=$2; shift 2
  log "bench $name $backend"
  (cd $code && PYTHONPATH=$code timeout 900 $PY -m securefl bench hamming "$@" --backend $backend --workers 1 \
     --json $out/${name}_${backend}.json > /dev/null 2>> $tmp/err)
}
bench digits rlwe --n 675 --L 1024 --parties 5
bench digits shade --n 675 --L 1024 --parties 5
bench n1000 rlwe --n 1000 --L 4096
bench n1000 shade --n 1000 --L 4096
log "fedprop both"
(cd $code && PYTHONPATH=$code timeout 1500 $PY -m securefl run --method fedprop --secure both \
   --out $tmp/fedprop > $tmp/fedprop.log 2>&1)
mkdir -p $out/fedprop_digits_secure_both
cp $tmp/fedprop/results.json $tmp/fedprop/README.md $out/fedprop_digits_secure_both/
bench mnist rlwe --n 6000 --L 4096 --parties 10
log done
