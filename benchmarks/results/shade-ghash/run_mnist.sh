#!/bin/bash
# Same session, after run_digits2.sh: MNIST's FedProp round shape with ring-LWE (FedProp's
# `auto` pick there), old (f3b96f8) then new, three rounds each.
out=$(cd "$(dirname "$0")" && pwd); old=/tmp/wt-s41old; new=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { tag=$1; src=$2; log "mnist $tag"; mkdir -p $out/mnist
  (cd $src && PYTHONPATH=$src $PY -m securefl bench hamming --n 6000 --L 4096 --parties 10 --rounds 3 \
     --backend rlwe --workers 1 --json $out/mnist/$tag.json > /dev/null); }
b old-1 $old
b new-1 $new
log done
