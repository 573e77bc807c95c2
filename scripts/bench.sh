#!/usr/bin/env bash
# Benchmark (not a test): SINGLE through the API against the raw limit, measured in the same
# run; 4 ranks, cache in /dev/shm, prefix in /tmp, SCR_FLUSH=0.
#
#   checkpoint: each pair writes the same bytes raw (a writer that deletes its previous file
#     outside the timed region) and then through SCR (SCR_Start_output..SCR_Complete_output,
#     SCR_CACHE_SIZE=1); ratio = raw time / SCR time. Pairs are GAP seconds apart (default 2,
#     idle), time for the library's background work (the CRC32, deleting the evicted
#     checkpoint) to finish rather than slow the next raw write. Rounds alternate a run with
#     the background CRC32 (SCR_CRC_ON_COPY unset, the default) and one with SCR_CRC_ON_COPY=0.
#   restart: SCR_Init..SCR_Complete_restart (verification and reading included) against a
#     plain read of the same files right after; ratio = SCR time / read time. Rounds
#     alternate the default (every file checked against its CRC32) and SCR_CRC_ON_COPY=0.
#
# Usage: scripts/bench.sh [MiB per rank, default 256] [rounds, default 5]; GAP=seconds
# Previous figures are in BENCHMARKS.md.
. "$(dirname "$0")/common.sh"
mib=${1:-256}
rounds=${2:-5}
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
cache=$(mktemp -d /dev/shm/scr-bench.XXXXXX)
trap 'rm -rf "$work" "$cache"' EXIT
build_example bench_api "$work/bench_api"
export SCR_CACHE_BASE=$cache SCR_CNTL_BASE=$cache SCR_COPY_TYPE=SINGLE SCR_CACHE_BYPASS=0 SCR_FLUSH=0 SCR_CACHE_SIZE=1
mkdir -p "$work/prefix"
run() { # run VARIANT JOB MODE ARGS...: VARIANT is default or crc0; JOB names the job's cache
  local crc=()
  [ "$1" = crc0 ] && crc=(SCR_CRC_ON_COPY=0)
  (cd "$work/prefix" && env "${crc[@]}" SCR_PREFIX="$work/prefix" SCR_JOB_ID="bench-$2" \
    mpirun -np 4 "$work/bench_api" "${@:3}" --size $((mib << 20))) | grep -E '^(RATIO|TIME) '
}
machine
echo "== 4 ranks x $mib MiB, SINGLE, $rounds rounds"
for i in $(seq "$rounds"); do
  for v in default crc0; do run "$v" "$v" write --reps 3 --gap "${GAP:-2}" >>"$work/ckpt.$v"; done
done
rm -rf "${cache:?}"/*
run default restart write --reps 1 >/dev/null # one checkpoint in cache, with its CRC32s
for i in $(seq "$rounds"); do
  for v in default crc0; do run "$v" restart restart >>"$work/restart.$v"; done
done
echo "checkpoint, background CRC32 (default):"
summarize "$work/ckpt.default"
echo "checkpoint, SCR_CRC_ON_COPY=0:"
summarize "$work/ckpt.crc0"
echo "restart from cache, every file verified (default):"
summarize "$work/restart.default"
echo "restart from cache, SCR_CRC_ON_COPY=0 (no verification):"
summarize "$work/restart.crc0"
machine
