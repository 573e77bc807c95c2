#!/usr/bin/env bash
# Transparent-mode benchmark (issue targets in brackets), 4 ranks, cache in /dev/shm:
#   open+close of a non-matching file, with vs without the preload      [ratio <= 1.05]
#   open(O_CREAT|O_TRUNC)+write+close of a matching file, added time    [< 20 us per file]
#   checkpoint bandwidth through the preload vs the same program writing
#   straight to the same cache directory                               [ratio >= 0.95]
# Each figure is the median of 5 runs. Usage: scripts/bench-preload.sh [MiB per rank]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/mpienv.sh
mib=${1:-256}
cargo build --release --quiet -p scr-preload
lib=$PWD/target/release/libscr_preload.so
work=$(mktemp -d /dev/shm/scr-bench-preload.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/bench" examples/preload/bench_preload.c
export SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$work/cache SCR_CNTL_BASE=$work/cntl SCR_JOB_ID=bench
# no eviction inside the timed region (the direct baseline deletes nothing either)
export SCR_PRELOAD_PATTERNS='ckpt.*/**' SCR_FLUSH=0 SCR_COPY_TYPE=SINGLE SCR_CACHE_SIZE=16
mkdir -p "$SCR_PREFIX"
run() { # run <preload 0|1> args...
  local pre=$1; shift
  if [ "$pre" = 1 ]; then mpirun -np 4 -x LD_PRELOAD="$lib" "$work/bench" "$@"; else mpirun -np 4 "$work/bench" "$@"; fi |
    awk '/^RESULT/ { print $3 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
five() { for _ in 1 2 3 4 5; do run "$@"; done | median; }

plain_open=$(five 0 open "$work/elsewhere" 200000)
pre_open=$(five 1 open "$work/elsewhere" 200000)
plain_under=$(five 0 open "$SCR_PREFIX/other" 200000)
pre_under=$(five 1 open "$SCR_PREFIX/other" 200000)
plain_create=$(five 0 create "$SCR_PREFIX/ckpt.1" 20000)
pre_create=$(five 1 create "$SCR_PREFIX/ckpt.1" 20000)
direct=$(for _ in 1 2 3 4 5; do rm -rf "$work/cache/direct"; run 0 write "$work/cache/direct" "$mib"; done | median)
routed=$(for _ in 1 2 3 4 5; do rm -rf "$SCR_PREFIX/ckpt.2" "$work/cache" "$work/cntl"; run 1 write "$SCR_PREFIX/ckpt.2" "$mib"; done | median)
awk -v po="$plain_open" -v qo="$pre_open" -v pu="$plain_under" -v qu="$pre_under" -v pc="$plain_create" -v qc="$pre_create" -v d="$direct" -v r="$routed" -v m="$mib" 'BEGIN {
  printf "transparent mode, 4 ranks, cache and prefix in /dev/shm (median of 5)\n"
  printf "  open+close outside the prefix:   %8.3f us plain  %8.3f us preloaded  ratio %.3f  [<= 1.05]\n", po, qo, qo / po
  printf "  open+close, prefix, no pattern:  %8.3f us plain  %8.3f us preloaded  ratio %.3f\n", pu, qu, qu / pu
  printf "  create+write+close, matching:    %8.3f us plain  %8.3f us preloaded  added %.2f us  [< 20 us]\n", pc, qc, qc - pc
  printf "  checkpoint %d MiB/rank:           %8.1f MiB/s direct to cache  %8.1f MiB/s through the preload  ratio %.3f  [>= 0.95]\n", m, d, r, r / d
}'
