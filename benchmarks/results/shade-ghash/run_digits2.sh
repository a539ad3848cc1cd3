#!/bin/bash
# A second sitting, later the same session (after run.sh and run_auto.sh, the code at
# 5a586e8 plus a test): SHADE's steady digits round, old (f3b96f8) and new alternating.
out=$(cd "$(dirname "$0")" && pwd); old=/tmp/wt-s41old; new=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { tag=$1; src=$2; log "digits2 $tag"; mkdir -p $out/digits2
  (cd $src && PYTHONPATH=$src $PY -m securefl bench hamming --n 675 --L 1024 --parties 5 --rounds 10 \
     --backend shade --workers 1 --json $out/digits2/$tag.json > /dev/null); }
for i in 1 2 3; do
  b old-$i $old
  b new-$i $new
done
log done
