#!/usr/bin/env bash
# Benchmark (not a test): what background work costs the application, measured in the same run.
#
#   flush (4 ranks, cache in /dev/shm, prefix in /tmp on disk, SINGLE, SCR_FLUSH=0): each pair
#     takes a checkpoint that stays in cache and then one flagged output too, which SCR
#     flushes; ratio = the second's time / the first's (what the flush adds to the call), with
#     SCR_FLUSH_ASYNC=1 and, in alternating rounds, 0; the two are GAP seconds apart (default
#     1, idle), so the first one's background CRC32 does not slow the second. A compute kernel
#     runs while the flush does and again with nothing behind it: compute_flush = the first /
#     the second.
#   encode (simulated cluster of 4 nodes, storage in /dev/shm): checkpoints alternate between
#     two descriptors, odd ones SINGLE and even ones XOR (CKPT INTERVAL=2), each followed by
#     COMPUTE seconds of a compute kernel; checkpoint_even = XOR / SINGLE checkpoint time as
#     the application sees it, compute_even = compute after an XOR checkpoint / after a SINGLE
#     one (what the background encoding costs it). Rounds alternate SCR_ENCODE_ASYNC=1
#     (OMPI_MPI_THREAD_LEVEL=3 gives MPI_THREAD_MULTIPLE) and SCR_ENCODE_ASYNC=0.
#
# Usage: scripts/bench-async.sh [MiB per rank, default 64] [rounds, default 5]
#   COMPUTE=seconds after each checkpoint in the encode part (default 1); PARTS="flush encode"
# Previous figures are in BENCHMARKS.md.
. "$(dirname "$0")/common.sh"
mib=${1:-64}
rounds=${2:-5}
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
shm=$(mktemp -d /dev/shm/scr-bench.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
build_example bench_api "$work/bench_api"
export SCR_CACHE_BYPASS=0 SCR_FLUSH=0
machine
if [[ " ${PARTS:-flush encode} " == *" flush "* ]]; then
  for i in $(seq "$rounds"); do
    for async in 1 0; do
      rm -rf "$work/prefix" "${shm:?}"/* && mkdir -p "$work/prefix"
      (cd "$work/prefix" && SCR_PREFIX=$PWD SCR_CACHE_BASE=$shm SCR_CNTL_BASE=$shm SCR_COPY_TYPE=SINGLE SCR_CACHE_SIZE=4 \
        SCR_FLUSH_ASYNC=$async mpirun -np 4 "$work/bench_api" async --size $((mib << 20)) --reps 2 --gap "${GAP:-1}") |
        grep -E '^(RATIO|TIME) ' >>"$work/flush.$async"
    done
  done
  echo "== flush: 4 ranks x $mib MiB, SINGLE, $rounds rounds, SCR_FLUSH_ASYNC=1:"
  summarize "$work/flush.1"
  echo "== flush: the same, SCR_FLUSH_ASYNC=0:"
  summarize "$work/flush.0"
fi
if [[ " ${PARTS:-flush encode} " == *" encode "* ]]; then
  printf 'CKPT=0 INTERVAL=1 TYPE=SINGLE\nCKPT=1 INTERVAL=2 TYPE=XOR\n' >"$work/alternate.conf"
  for i in $(seq "$rounds"); do
    for async in 1 0; do
      rm -rf "$work/prefix" "${shm:?}"/* && mkdir -p "$work/prefix"
      (cd "$work/prefix" && SCR_PREFIX=$PWD SIM_NODE_ROOT=$shm SIM_NODE_MAP=n0,n1,n2,n3 SCR_CACHE_BASE=$shm/node/cache \
        SCR_CNTL_BASE=$shm/node/cntl SCR_COPY_TYPE=FILE SCR_CONF_FILE=$work/alternate.conf SCR_SET_SIZE=4 SCR_CACHE_SIZE=2 \
        SCR_ENCODE_ASYNC=$async OMPI_MPI_THREAD_LEVEL=3 OMPI_MCA_btl_vader_single_copy_mechanism=cma \
        mpirun -np 4 "$repo/scripts/sim-node.sh" "$work/bench_api" alternate --size $((mib << 20)) --reps 2 \
        --compute "${COMPUTE:-1}") | grep -E '^(RATIO|TIME) ' >>"$work/encode.$async"
    done
  done
  echo "== encode: 4 ranks on 4 nodes x $mib MiB, XOR (even) vs SINGLE (odd), $rounds rounds, SCR_ENCODE_ASYNC=1:"
  summarize "$work/encode.1"
  echo "== encode: the same, SCR_ENCODE_ASYNC=0:"
  summarize "$work/encode.0"
fi
machine
