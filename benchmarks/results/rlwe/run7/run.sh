#!/bin/bash
# One quiet sitting (2026-11-28, AMD EPYC, 2 cores): FedProp --secure both at a614533 (old, a
# worktree) and d22b186 (new) alternating, then bench hamming at the digits and MNIST shapes
# (new), then the MNIST round old/new alternating. Paths are this session's; outputs here.
out=$(cd "$(dirname "$0")" && pwd); old=/work/wt-old; new=/work/main
PY=/work/main/.venv/bin/python; export SECUREFL_DATA=/work/shared/datasets
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
fp() { v=$1; i=$2; src=$([ $v = old ] && echo $old || echo $new); log "fedprop $v $i"
  (cd $src && PYTHONPATH=$src $PY -m securefl run --method fedprop --secure both --out /tmp/run7/fedprop-$v-$i > /dev/null 2>&1)
  mkdir -p $out/fedprop-$v-$i && cp /tmp/run7/fedprop-$v-$i/results.json $out/fedprop-$v-$i/; }
b() { tag=$1; v=$2; backend=$3; shift 3; src=$([ $v = old ] && echo $old || echo $new); log "bench $tag $v $backend"
  (cd $src && PYTHONPATH=$src $PY -m securefl bench hamming "$@" --backend $backend --workers 1 --json $out/$tag-$v-$backend.json > /dev/null); }
for i in 1 2; do fp old $i; fp new $i; done
b digits new rlwe --n 675 --L 1024 --parties 5 --rounds 3
b digits new shade --n 675 --L 1024 --parties 5 --rounds 3
b mnist new rlwe --n 6000 --L 4096 --parties 10 --rounds 2
for i in 1 2; do b mnist$i old rlwe --n 6000 --L 4096 --parties 10; b mnist$i new rlwe --n 6000 --L 4096 --parties 10; done
log done
