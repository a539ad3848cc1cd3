#!/bin/bash
# After run.sh (same session): FedProp's digits default with --secure both and its `auto`
# backend (ring-LWE), old (f3b96f8) and new alternating, once ghash.SMALL went from 64 to
# 512 KiB (run.sh's auto-new runs, kept as auto-new-small64k-*, had the compiled GHASH on
# ring-LWE's mid-size tags).
out=$(cd "$(dirname "$0")" && pwd); old=/tmp/wt-s41old; new=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
f() { tag=$1; src=$2; shift 2; log "fedprop $tag"; mkdir -p $out/fedprop
  (cd $src && PYTHONPATH=$src $PY -m securefl run --method fedprop --secure both "$@" \
     --out /tmp/s41/fp-$tag > /dev/null 2>&1)
  cp /tmp/s41/fp-$tag/results.json $out/fedprop/$tag.json; }
for i in 3 4; do
  f auto-old-$i $old
  f auto-new-$i $new
done
log done
