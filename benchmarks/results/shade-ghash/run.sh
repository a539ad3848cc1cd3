#!/bin/bash
# One sitting (2026-11-28, AMD EPYC Zen 3, 2 cores, nothing else running), back to back:
# SHADE's steady round alternating `old` (f3b96f8, this stop's start), `nocl` (the new code
# with SECUREFL_CLMUL=0: OpenSSL's GHASH, with the other cuts: a kernel call per frame,
# transposes by tile column, compiled row PRGs, U in one pass) and `new` (the links' GMAC
# through securefl.crypto.ghash as well); ring-LWE (`rlwe`, new code) at the same shapes;
# then FedProp's digits default with --secure both, old and new, with its `auto` backend
# (ring-LWE) and with SHADE.  Paths are this session's; outputs here.
out=$(cd "$(dirname "$0")" && pwd); old=/tmp/wt-s41old; new=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { dir=$1; tag=$2; src=$3; var=$4; backend=$5; shift 5; log "$dir $tag"; mkdir -p $out/$dir
  (cd $src && env $var PYTHONPATH=$src $PY -m securefl bench hamming "$@" --backend $backend --workers 1 \
     --json $out/$dir/$tag.json > /dev/null); }
f() { tag=$1; src=$2; shift 2; log "fedprop $tag"; mkdir -p $out/fedprop
  (cd $src && PYTHONPATH=$src $PY -m securefl run --method fedprop --secure both "$@" \
     --out /tmp/s41/fp-$tag > /dev/null 2>&1)
  cp /tmp/s41/fp-$tag/results.json $out/fedprop/$tag.json; }
for i in 1 2 3; do
  b digits old-$i $old X=1 shade --n 675 --L 1024 --parties 5 --rounds 10
  b digits nocl-$i $new SECUREFL_CLMUL=0 shade --n 675 --L 1024 --parties 5 --rounds 10
  b digits new-$i $new X=1 shade --n 675 --L 1024 --parties 5 --rounds 10
done
b digits rlwe-1 $new X=1 rlwe --n 675 --L 1024 --parties 5 --rounds 10
for i in 1 2; do
  b n1000 old-$i $old X=1 shade --n 1000 --L 4096 --parties 2 --rounds 3
  b n1000 new-$i $new X=1 shade --n 1000 --L 4096 --parties 2 --rounds 3
done
b n1000 rlwe-1 $new X=1 rlwe --n 1000 --L 4096 --parties 2 --rounds 3
b cifar old-1 $old X=1 shade --n 2500 --L 4096 --parties 5 --rounds 2
b cifar new-1 $new X=1 shade --n 2500 --L 4096 --parties 5 --rounds 2
b cifar rlwe-1 $new X=1 rlwe --n 2500 --L 4096 --parties 5 --rounds 2
b n5000 old-1 $old X=1 shade --n 5000 --L 4096 --parties 2
b n5000 new-1 $new X=1 shade --n 5000 --L 4096 --parties 2
b n5000 rlwe-1 $new X=1 rlwe --n 5000 --L 4096 --parties 2
for i in 1 2; do
  f auto-old-$i $old
  f auto-new-$i $new
  f shade-old-$i $old --set hyper.fedprop.hamming_backend=shade
  f shade-new-$i $new --set hyper.fedprop.hamming_backend=shade
done
log done
