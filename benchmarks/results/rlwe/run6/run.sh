#!/bin/bash
# One run, back to back, of main 1f8a315 on a quiet machine: issue 23's Must-show table at every shape it names.
PY=/work/main/.venv/bin/python
export SECUREFL_DATA=/work/shared/datasets
code=/work/wt-run6
out=/work/main/benchmarks/results/rlwe/run6
tmp=/tmp/rlwe-run6; mkdir -p $tmp
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
bench() { name=$1; backend=$2; shift 2
  log "bench $name $backend"
  (cd $code && PYTHONPATH=$code timeout 900 $PY -m securefl bench hamming "$@" --backend $backend --workers 1 \
     --json $out/${name}_${backend}.json > /dev/null 2>> $tmp/err)
}
for backend in rlwe lwe shade; do bench digits $backend --n 675 --L 1024 --parties 5 --rounds 3; done
for backend in rlwe lwe shade; do bench n1000 $backend --n 1000 --L 4096; done
for backend in rlwe lwe shade; do bench cifar $backend --n 2500 --L 4096 --parties 5; done
for backend in rlwe lwe shade; do bench n5000 $backend --n 5000 --L 4096; done
for backend in rlwe lwe; do bench mnist $backend --n 6000 --L 4096 --parties 10; done
log "fedprop both"
(cd $code && PYTHONPATH=$code timeout 1500 $PY -m securefl run --method fedprop --secure both \
   --out $tmp/fedprop > $tmp/fedprop.log 2>&1)
mkdir -p $out/fedprop_digits_secure_both
cp $tmp/fedprop/results.json $tmp/fedprop/README.md $out/fedprop_digits_secure_both/
log done
