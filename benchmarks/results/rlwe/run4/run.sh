#!/bin/bash
# One run, back to back: old = main b8a9675 (/work/wt-rlwe-old), new = branch rlwe (/work/wt-rlwe).
PY=/work/main/.venv/bin/python
export SECUREFL_DATA=/work/shared/datasets
out=/work/wt-rlwe/benchmarks/results/rlwe/run4
tmp=/tmp/rlwe-run4; mkdir -p $tmp
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
bench() { name=$1; code=$2; tag=$3; shift 3
  log "bench $name $tag"
  (cd $code && PYTHONPATH=$code timeout 900 $PY -m securefl bench hamming "$@" --backend rlwe --workers 1 \
     --json $out/${name}_rlwe_${tag}.json > /dev/null 2>> $tmp/err)
}
fedprop() { code=$1; tag=$2
  log "fedprop both $tag"
  (cd $code && PYTHONPATH=$code timeout 1500 $PY -m securefl run --method fedprop --secure both \
     --out $tmp/fedprop_$tag > $tmp/fedprop_$tag.log 2>&1)
  mkdir -p $out/fedprop_digits_secure_both_$tag
  cp $tmp/fedprop_$tag/results.json $tmp/fedprop_$tag/README.md $out/fedprop_digits_secure_both_$tag/
}
# warm-up (not recorded): both checkouts' numba kernels compiled into their caches first
for code in /work/wt-rlwe-old /work/wt-rlwe; do
  (cd $code && PYTHONPATH=$code $PY -m securefl bench hamming --n 40 --L 256 --parties 3 --backend rlwe --workers 1 > /dev/null 2>&1)
done
bench digits /work/wt-rlwe-old old --n 675 --L 1024 --parties 5
bench digits /work/wt-rlwe new --n 675 --L 1024 --parties 5
bench mnist /work/wt-rlwe-old old --n 6000 --L 4096 --parties 10
bench mnist /work/wt-rlwe new --n 6000 --L 4096 --parties 10
fedprop /work/wt-rlwe-old old
fedprop /work/wt-rlwe new
log done
