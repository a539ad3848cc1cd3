#!/bin/bash
# One sitting (2026-11-28, AMD EPYC, 2 cores, nothing else running): SHADE's steady round at
# the digits shape and larger ones, alternating `old` (5531ce2, this stop's start; a worktree,
# whose `python -m securefl` keeps glibc's default allocator), the new code with
# SECUREFL_RETAIN_MEMORY=0 (`fresh`: paired tails, branch-free receiver, link keys, but fresh
# pages) and the new code (`new`: the command keeps freed memory, securefl.memory).
# Paths are this session's; outputs here.
out=$(cd "$(dirname "$0")" && pwd); old=/tmp/wt-start; new=/work/main
PY=/work/main/.venv/bin/python
log() { echo "$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" >> $out/load_log.txt; }
b() { dir=$1; tag=$2; src=$3; var=$4; shift 4; log "$dir $tag"; mkdir -p $out/$dir
  (cd $src && env $var PYTHONPATH=$src $PY -m securefl bench hamming "$@" --backend shade --workers 1 \
     --json $out/$dir/$tag.json > /dev/null); }
for i in 1 2 3; do
  b digits old-$i $old X=1 --n 675 --L 1024 --parties 5 --rounds 6
  b digits fresh-$i $new SECUREFL_RETAIN_MEMORY=0 --n 675 --L 1024 --parties 5 --rounds 6
  b digits new-$i $new X=1 --n 675 --L 1024 --parties 5 --rounds 6
done
for i in 1 2; do
  b n1000 old-$i $old X=1 --n 1000 --L 4096 --parties 2 --rounds 3
  b n1000 new-$i $new X=1 --n 1000 --L 4096 --parties 2 --rounds 3
done
b cifar old-1 $old X=1 --n 2500 --L 4096 --parties 5 --rounds 2
b cifar new-1 $new X=1 --n 2500 --L 4096 --parties 5 --rounds 2
b n5000 old-1 $old X=1 --n 5000 --L 4096 --parties 2
b n5000 new-1 $new X=1 --n 5000 --L 4096 --parties 2
log done
