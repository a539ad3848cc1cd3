#!/bin/bash
# Same sitting as run.sh, later: the digits shape, alternating `before` (6e86a00: everything in
# run.sh's `new`; a worktree) and `after` (the TCCR hashes through AES-NI, edc791d).
out=$(cd "$(dirname "$0")" && pwd); before=/tmp/wt-base; after=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { tag=$1; src=$2; log "tccr $tag"; mkdir -p $out/tccr
  (cd $src && PYTHONPATH=$src $PY -m securefl bench hamming --n 675 --L 1024 --parties 5 --rounds 6 \
     --backend shade --workers 1 --json $out/tccr/$tag.json > /dev/null); }
for i in 1 2 3; do b before-$i $before; b after-$i $after; done
log done
