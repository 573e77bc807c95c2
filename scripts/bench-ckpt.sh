#!/usr/bin/env bash
# The cost of a transparent-mode checkpoint, two builds of libscr_preload.so side by side:
# `bench_preload ckpt` (examples/preload/bench_preload.c: each of 4 ranks writes 6 files of
# 9,000 bytes into processor<r>/0.<k>/, OpenFOAM's layout, then one world allreduce completes
# the checkpoint), SCR_COPY_TYPE=SINGLE, SCR_FLUSH=0, everything in /dev/shm. Each round runs
# build A and build B (in alternating order) on fresh directories; printed per round and at
# the end: milliseconds per checkpoint (the slowest rank's mean), median (min-max) of each
# build and of the per-round ratio B/A.
# Usage: scripts/bench-ckpt.sh LIB_A LIB_B [rounds, default 7] [checkpoints, default 200]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mpienv.sh
a=${1:?LIB_A: a libscr_preload.so}
b=${2:?LIB_B: a libscr_preload.so}
rounds=${3:-7}
n=${4:-200}
for lib in "$a" "$b"; do
  [ -f "$lib" ] || { echo "$lib: no such file" >&2; exit 2; }
done
work=$(mktemp -d /dev/shm/scr-bench-ckpt.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/bp" examples/preload/bench_preload.c
one() { # one <lib> -> ms per checkpoint
  local w=$work/run
  rm -rf "$w" && mkdir -p "$w"
  (cd "$w" && SCR_PREFIX=$w SCR_CACHE_BASE=$w/cache SCR_CNTL_BASE=$w/cntl SCR_JOB_ID=ck SCR_FLUSH=0 \
    SCR_COPY_TYPE=SINGLE SCR_PRELOAD_PATTERNS='processor*/[0-9]*/**' \
    mpirun -np 4 -x LD_PRELOAD="$1" "$work/bp" ckpt "$w" "$n" | awk '/^RESULT/ { print $3 }')
}
echo "checkpoints of 6 x 9,000 bytes per rank, 4 ranks, $n per run; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$rounds"); do
  if [ $((i % 2)) = 1 ]; then x=$(one "$a"); y=$(one "$b"); else y=$(one "$b"); x=$(one "$a"); fi
  echo "$x $y"
done | awk '
  function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  { k++; a[k] = $1; b[k] = $2; r[k] = $2 / $1; printf "  round %d: A %.3f ms, B %.3f ms\n", k, $1, $2 }
  END { printf "A %.3f ms (%.3f-%.3f); B %.3f ms (%.3f-%.3f); B/A %.3f (%.3f-%.3f), %d rounds\n",
               med(a, k), a[1], a[k], med(b, k), b[1], b[k], med(r, k), r[1], r[k], k }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
