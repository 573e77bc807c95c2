#!/usr/bin/env bash
# Benchmark (not a test): SCR's bookkeeping for a checkpoint of many small files per rank
# (examples/c/bench_files.c), NP ranks (default 2) on this node, cache and prefix in /dev/shm,
# SINGLE, SCR_FLUSH=0, SCR_CACHE_SIZE=2. Per round and per number of files N, a fresh job
# writes two checkpoints, then a second run restarts from the newest one (every file routed,
# read and checked) and writes one more. Printed per N: the median (min-max) over the rounds of
# the N calls of SCR_Route_file in a checkpoint, its SCR_Complete_output, and the N calls of
# SCR_Route_file in the restart (each the slowest rank's time).
#
# SCR_C_PREFIX=<C SCR 3.1 install> runs the same program against C SCR too, alternating with
# ours in each round (which goes first alternates), for N up to C_MAX (default 4000: C SCR
# rewrites its filemap at every route, and its time grows with the square of N).
#
# Usage: scripts/bench-files.sh ["N ..." (default "1000 4000 16000")] [rounds (default 3)]
. "$(dirname "$0")/common.sh"
sizes=${1:-1000 4000 16000}
rounds=${2:-3}
np=${NP:-2}
cprefix=${SCR_C_PREFIX:-}
unset SCR_C_PREFIX
work=$(mktemp -d /dev/shm/scr-bench-files.XXXXXX)
trap 'rm -rf "$work"' EXIT
build_example bench_files "$work/bench_files.rs"
impls=(rs)
if [ -n "$cprefix" ]; then
  mpicc -O2 -Wall -I "$cprefix/include" "$repo/examples/c/bench_files.c" -L "$cprefix/lib" -lscr \
    -Wl,-rpath,"$cprefix/lib" -o "$work/bench_files.c"
  impls=(rs c)
fi
export SCR_FLUSH=0 SCR_COPY_TYPE=SINGLE SCR_CACHE_BYPASS=0 SCR_CACHE_SIZE=2 USER=${USER:-$(id -un)}
unset SCR_CONF_FILE SCR_CRC_ON_COPY
one() { # one IMPL N: a fresh job, two checkpoints; then a restart and one more
  rm -rf "$work/job"
  mkdir -p "$work/job/prefix"
  local env=(SCR_PREFIX="$work/job/prefix" SCR_CACHE_BASE="$work/job/cache" SCR_CNTL_BASE="$work/job/cntl" SCR_JOB_ID=files)
  (cd "$work/job/prefix" && env "${env[@]}" mpirun -np "$np" "$work/bench_files.$1" "$2" 2 &&
    env "${env[@]}" mpirun -np "$np" "$work/bench_files.$1" "$2" 1) | grep -E '^(TIME|BAD) '
}
machine
echo "== $np ranks, N small files per rank per checkpoint, $rounds rounds; C SCR: ${cprefix:-not run}"
for i in $(seq "$rounds"); do
  order=("${impls[@]}")
  [ $((i % 2)) = 0 ] && [ ${#impls[@]} = 2 ] && order=(c rs)
  for n in $sizes; do
    for impl in "${order[@]}"; do
      [ "$impl" = c ] && [ "$n" -gt "${C_MAX:-4000}" ] && continue
      one "$impl" "$n" >>"$work/out.$impl.$n"
    done
  done
done
printf "  %-8s %-6s %-26s %-26s %-26s %s\n" N impl "route (N calls), s" "SCR_Complete_output, s" "restart route (N calls), s" "bad"
for n in $sizes; do
  for impl in "${impls[@]}"; do
    f=$work/out.$impl.$n
    [ -s "$f" ] || continue
    printf "  %-8s %-6s" "$n" "$([ "$impl" = rs ] && echo this || echo "C 3.1")"
    for k in route complete restart; do
      awk -v k="$k" '$1 == "TIME" && $2 == k { print $3 }' "$f" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { printf " %-26s", "-"; exit }
        med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf " %-26s", sprintf("%.4f (%.4f-%.4f)", med, v[1], v[NR]) }'
    done
    awk '$1 == "BAD" { b += $2 } END { printf " %d\n", b }' "$f"
  done
done
machine
