#!/bin/bash
# SHADE at the issue's larger shapes, tiles (SECUREFL_AESNI=0) then fused, alternating; one
# round each (setup included, seconds_after_setup reported). An MNIST run (nice 10, one core)
# shared the machine. Paths are this session's; outputs here.
out=$(cd "$(dirname "$0")" && pwd)/large; PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { tag=$1; var=$2; shift 2; log "$tag"
  (cd /work/main && env $var $PY -m securefl bench hamming "$@" --backend shade --workers 1 \
     --json $out/$tag.json > /dev/null); }
b n5000-tiles SECUREFL_AESNI=0 --n 5000 --L 4096 --parties 2
b n5000-fused X=1 --n 5000 --L 4096 --parties 2
b cifar-tiles SECUREFL_AESNI=0 --n 2500 --L 4096 --parties 5
b cifar-fused X=1 --n 2500 --L 4096 --parties 5
log done
