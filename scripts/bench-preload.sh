#!/usr/bin/env bash
# Transparent-mode benchmark, 4 ranks, cache and prefix in /dev/shm (issue targets in brackets):
#   open+close of a file outside the prefix, preloaded vs plain                [ratio <= 1.05]
#   stat of a plain file in the prefix (OpenFOAM's per-step dictionary checks)  [no target]
#   open(O_CREAT|O_TRUNC)+write+close of a matching file, added time           [<= 20 us]
#   checkpoint bandwidth through the preload vs writing straight to the cache  [ratio >= 0.95]
#   listing a checkpoint directory of 1,000 cached files vs 1,000 plain files  [ratio <= 2]
#     (repeated, and the first listing after the checkpoint completed)
# Each figure alternates the two runs (plain/limit, then preloaded) PAIRS times (default 5)
# in this one invocation and reports the median, min and max of the per-pair ratio (or
# difference), with the medians of both sides. The release build of libscr_preload.so is
# reused when it is newer than every source file; otherwise it is built.
# Usage: scripts/bench-preload.sh [MiB per rank] [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/mpienv.sh
mib=${1:-256}
pairs=${2:-5}
lib=$PWD/target/release/libscr_preload.so
if [ -f "$lib" ] && [ -z "$(find src preload/src Cargo.toml Cargo.lock preload/Cargo.toml -newer "$lib" -print -quit)" ]; then
  echo "reusing $lib"
else
  cargo build --release --quiet -p scr-preload
fi
work=$(mktemp -d /dev/shm/scr-bench-preload.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/bench" examples/preload/bench_preload.c
export SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$work/cache SCR_CNTL_BASE=$work/cntl SCR_JOB_ID=bench
# no eviction inside the timed region (the direct baseline deletes nothing either)
export SCR_PRELOAD_PATTERNS='ckpt.*/**' SCR_FLUSH=0 SCR_COPY_TYPE=SINGLE SCR_CACHE_SIZE=16
mkdir -p "$SCR_PREFIX"

run() { # run <preload 0|1> args... -> the RESULT value
  local pre=$1
  shift
  if [ "$pre" = 1 ]; then mpirun -np 4 -x LD_PRELOAD="$lib" "$work/bench" "$@"; else mpirun -np 4 "$work/bench" "$@"; fi |
    awk '/^RESULT/ { print $3 }'
}
fresh() { rm -rf "$SCR_PREFIX" "$work/cache" "$work/cntl" "$work/direct" "$work/plain"; mkdir -p "$SCR_PREFIX"; }

# pairs <name> <ratio|diff> <plain command...> -- <preloaded command...>
# Prints: name, median of each side, median/min/max of preloaded/plain (or preloaded-plain).
pairs() {
  local name=$1 how=$2
  shift 2
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  for _ in $(seq "$pairs"); do
    fresh
    x=$("${a[@]}")
    fresh
    y=$("${b[@]}")
    echo "$x $y"
  done | awk -v name="$name" -v how="$how" '
    function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    { n++; a[n] = $1; b[n] = $2; r[n] = how == "ratio" ? $2 / $1 : $2 - $1 }
    END { ma = med(a, n); mb = med(b, n); mr = med(r, n); lo = r[1]; hi = r[n]
          printf "  %-44s %10.3f %10.3f   %s %.3f (min %.3f, max %.3f, %d pairs)\n", name, ma, mb, how, mr, lo, hi, n }'
}

echo "transparent mode, 4 ranks, cache and prefix in /dev/shm; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "  %-44s %10s %10s   %s\n" "measurement" "plain" "preloaded" "figure"
pairs "open+close outside the prefix (us)" ratio \
  run 0 open "$work/elsewhere" 200000 -- run 1 open "$work/elsewhere" 200000
pairs "open+close, prefix, no pattern (us)" ratio \
  run 0 open "$SCR_PREFIX/other" 200000 -- run 1 open "$SCR_PREFIX/other" 200000
pairs "stat, prefix, no pattern (us)" ratio \
  run 0 stat "$SCR_PREFIX/other" 200000 -- run 1 stat "$SCR_PREFIX/other" 200000
pairs "create+write+close, matching (us)" diff \
  run 0 create "$SCR_PREFIX/ckpt.1" 20000 -- run 1 create "$SCR_PREFIX/ckpt.1" 20000
pairs "checkpoint $mib MiB/rank (MiB/s; plain: to cache)" ratio \
  run 0 write "$work/direct" "$mib" -- run 1 write "$SCR_PREFIX/ckpt.2" "$mib"
pairs "listing 1,000 files, 2000 times (us; cached)" ratio \
  run 0 list "$work/plain" 2000 -- run 1 list "$SCR_PREFIX/ckpt.3" 2000
pairs "listing 1,000 files, first time (us; cached)" ratio \
  run 0 list "$work/plain" 1 -- run 1 list "$SCR_PREFIX/ckpt.3" 1
echo "targets: open ratio <= 1.05, create diff <= 20 us, checkpoint ratio >= 0.95, listing ratio <= 2"
