#!/bin/bash
# A/B of a614533 (wt-old) vs working tree (main), alternating, bench JSONs in $(dirname "$0")
mkdir -p $(dirname "$0"); export SECUREFL_DATA=/work/shared/datasets
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $(dirname "$0")/load_log.txt; }
b() { tag=$1; v=$2; shift 2; src=$([ $v = old ] && echo /work/wt-old || echo /work/main)
  log "$tag $v"; (cd $src && PYTHONPATH=$src timeout 900 /work/main/.venv/bin/python -m securefl bench hamming "$@" --backend rlwe --workers 1 --json $(dirname "$0")/$tag-$v.json > /dev/null 2>> $(dirname "$0")/err); }
for i in 1 2; do for v in old new; do b digits$i $v --n 675 --L 1024 --parties 5 --rounds 3; done; done
for i in 1 2 3; do for v in old new; do b mnist$i $v --n 6000 --L 4096 --parties 10; done; done
log done
