#!/bin/bash
# One sitting (2026-11-28, AMD EPYC, 2 cores): SHADE's steady round at the digits shape,
# alternating `old` (a614533, whose SHADE path equals ef91e0b's; a worktree), the new code with
# SECUREFL_AESNI=0 (`tiles`: OpenSSL tiles, row-PRG contexts kept) and the new code (`fused`:
# AES-NI expansion inside the share kernels); then n = 1000, L = 4096, tiles / fused.
# Paths are this session's; outputs here.
out=$(cd "$(dirname "$0")" && pwd); old=/work/wt-old; new=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/digits/load_log.txt; }
b() { dir=$1; tag=$2; src=$3; var=$4; shift 4; log "$tag"
  (cd $src && env $var PYTHONPATH=$src $PY -m securefl bench hamming "$@" --backend shade --workers 1 \
     --json $out/$dir/$tag.json > /dev/null); }
for i in 1 2 3; do
  b digits old-$i $old X=1 --n 675 --L 1024 --parties 5 --rounds 5
  b digits tiles-$i $new SECUREFL_AESNI=0 --n 675 --L 1024 --parties 5 --rounds 5
  b digits fused-$i $new X=1 --n 675 --L 1024 --parties 5 --rounds 5
done
for i in 1 2; do
  b n1000 tiles-$i $new SECUREFL_AESNI=0 --n 1000 --L 4096 --parties 2 --rounds 2
  b n1000 fused-$i $new X=1 --n 1000 --L 4096 --parties 2 --rounds 2
done
log done
