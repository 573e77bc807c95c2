#!/usr/bin/env bash
# Benchmark (not a test): SCR through the API against the raw limit measured in the same
# run, at 4 ranks x 64 MiB and 4 ranks x 256 MiB, cache in /dev/shm, prefix in /tmp.
# Figures are printed; previous ones are in BENCHMARKS.md.
. "$(dirname "$0")/common.sh"
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
mkdir -p "$work/prefix"
build_example bench_api "$work/bench_api"
export SCR_PREFIX=$work/prefix SCR_CACHE_BASE=/dev/shm SCR_CNTL_BASE=/dev/shm SCR_COPY_TYPE=SINGLE
export SCR_CACHE_BYPASS=0 SCR_FLUSH=0 SCR_CACHE_SIZE=1
for mib in 64 256; do
  echo "== 4 ranks x $mib MiB"
  (cd "$work/prefix" && mpirun -np 4 "$work/bench_api" write --size $((mib << 20)) --reps 5 | grep BENCH)
  (cd "$work/prefix" && mpirun -np 4 "$work/bench_api" restart --size $((mib << 20)) | grep BENCH)
  rm -rf /dev/shm/"$(id -un)"/scr.prefix-* "$work/prefix"/* "$work/prefix"/.scr
done
rm -rf "$work"
