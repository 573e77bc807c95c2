#!/usr/bin/env bash
# Benchmark (not a test): what an asynchronous flush costs the application. In one run with
# SCR_FLUSH=0, each repetition takes a checkpoint that stays in cache (SINGLE, no flush) and
# one flagged output too, which SCR flushes; the ratio of the two is the time the flush adds
# to the checkpoint call. A compute kernel is timed while that flush runs and again with
# nothing behind it. The same run with SCR_FLUSH_ASYNC=0 gives the synchronous figure beside
# it. 4 ranks, cache in /dev/shm, prefix in /tmp; previous figures are in BENCHMARKS.md.
#   scripts/bench-async.sh [MiB per rank, default 64] [reps, default 5]
. "$(dirname "$0")/common.sh"
mib=${1:-64}
reps=${2:-5}
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
build_example bench_api "$work/bench_api"
export SCR_CACHE_BASE=/dev/shm SCR_CNTL_BASE=/dev/shm SCR_COPY_TYPE=SINGLE
export SCR_CACHE_BYPASS=0 SCR_FLUSH=0 SCR_CACHE_SIZE=4
for async in 1 0; do
  mkdir -p "$work/prefix$async"
  echo "== 4 ranks x $mib MiB, SCR_FLUSH_ASYNC=$async"
  (cd "$work/prefix$async" && SCR_PREFIX=$PWD SCR_FLUSH_ASYNC=$async SCR_JOB_ID=bench-async-$$-$async \
    mpirun -np 4 "$work/bench_api" async --size $((mib << 20)) --reps "$reps" | grep BENCH)
  rm -rf /dev/shm/"$(id -un)"/scr.bench-async-$$-$async
done
