#!/usr/bin/env bash
# Benchmark (not a test): the floor under any check of every byte of a checkpoint on this
# machine, without SCR (examples/c/bench_pass.c): 4 ranks on the node's cores, each with its
# own file of MiB in /dev/shm; per repetition the raw write, a plain read (CHUNK bytes at a
# time, as bench.sh's), a pass over a populated mapping of the file (as SCR's restart check
# maps it; a sum of its words, no CRC32 arithmetic) and the same sum over the bytes already in
# memory. Prints median, min and max of each time and of the ratios map/read, mem/read and
# map/write. SCR's restart figure (bench.sh: SCR_Init..SCR_Complete_restart over a plain
# read) cannot go below 1 + map/read when it checks every byte, nor its SINGLE checkpoint
# with the background CRC32 below write + map/2 per rank on 2 cores for 4 ranks (what the
# CRC32 threads add when there is no idle core).
#
# Usage: scripts/bench-pass.sh [MiB per rank, default 256] [repetitions, default 7]
# Figures are in BENCHMARKS.md.
. "$(dirname "$0")/common.sh"
mib=${1:-256}
reps=${2:-7}
work=$(mktemp -d /tmp/scr-pass.XXXXXX)
cache=$(mktemp -d /dev/shm/scr-pass.XXXXXX)
trap 'rm -rf "$work" "$cache"' EXIT
mpicc -O2 -Wall -Wextra "$repo/examples/c/bench_pass.c" -o "$work/bench_pass"
machine
echo "== 4 ranks x $mib MiB in /dev/shm, $reps repetitions"
SCR_CACHE_BASE=$cache mpirun -np 4 "$work/bench_pass" --size $((mib << 20)) --reps "$reps" >"$work/out"
summarize "$work/out"
machine
