#!/bin/bash
# One sitting (AMD EPYC Zen 3, 2 cores, nothing else running), back to back: the digits round
# (5 x 135 points, L = 1024, 10 rounds) with SHADE and ring-LWE alternating, each record with
# its floor (`seconds_lower_bound`: SHADE's AES bytes at the run's AES rate; ring-LWE's
# products at the run's GEMM and FFT rates); then FedProp's digits default with --secure both,
# with ring-LWE (its `auto` pick) and with SHADE; first, this machine's GMAC rate (ghash.json),
# what SHADE's links pay on top of its AES floor.  Outputs here.
out=$(cd "$(dirname "$0")" && pwd); src=$(cd "$out/../../.." && pwd)
PY=$src/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { tag=$1; backend=$2; log "digits $tag"; mkdir -p $out/digits
  (cd $src && $PY -m securefl bench hamming --n 675 --L 1024 --parties 5 --rounds 10 --backend $backend \
     --workers 1 --json $out/digits/$tag.json > /dev/null) || log "digits $tag FAILED"; }
f() { tag=$1; shift; log "fedprop $tag"; mkdir -p $out/fedprop
  rm -rf /tmp/floors-fp-$tag
  if (cd $src && $PY -m securefl run --method fedprop --secure both "$@" --out /tmp/floors-fp-$tag > /dev/null 2>&1)
  then cp /tmp/floors-fp-$tag/results.json $out/fedprop/$tag.json; else log "fedprop $tag FAILED"; fi; }
log ghash; (cd $src && $PY $out/ghash_rate.py > $out/ghash.json)
for i in 1 2 3; do
  b shade-$i shade
  b rlwe-$i rlwe
done
for i in 1 2; do
  f rlwe-$i
  f shade-$i --set hyper.fedprop.hamming_backend=shade
done
log done
