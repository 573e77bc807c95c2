#!/usr/bin/env bash
# Benchmark (not a test): checkpoint bandwidth of each redundancy scheme against the raw write
# of the same bytes to the same RAM-disk storage in the same run, and the restart time after
# losing nodes against that raw write time. Runs on the simulated cluster (scripts/sim-node.sh)
# with node storage in /dev/shm: 4 ranks on 4 nodes x 256 MiB and 8 ranks on 4 nodes x 128 MiB.
# Figures are printed; previous ones are in BENCHMARKS.md.
. "$(dirname "$0")/common.sh"
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
sim=$(mktemp -d /dev/shm/scr-sim.XXXXXX)
trap 'rm -rf "$work" "$sim"' EXIT
build_example bench_api "$work/bench_api"
# Single-copy shared-memory transfers (process_vm_readv) for the set traffic; the tests keep
# the portable copy-in/copy-out default.
export OMPI_MCA_btl_vader_single_copy_mechanism=cma
export SIM_NODE_ROOT=$sim SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$sim/node/cache SCR_CNTL_BASE=$sim/node/cntl
export SCR_CACHE_BYPASS=0 SCR_FLUSH=0 SCR_CACHE_SIZE=1 SCR_SET_SIZE=4 SCR_SET_FAILURES=2
run() { (cd "$work/prefix" && mpirun -np "$1" "$repo/scripts/sim-node.sh" "$work/bench_api" "${@:2}"); }
for case in "4 256 n0,n1,n2,n3" "8 128 n0,n0,n1,n1,n2,n2,n3,n3"; do
  set -- $case
  np=$1 mib=$2 map=$3
  for scheme in ${SCHEMES:-SINGLE PARTNER XOR RS}; do
    rm -rf "$sim"/nodes "$work/prefix" && mkdir -p "$work/prefix"
    export SIM_NODE_MAP=$map SCR_COPY_TYPE=$scheme
    out=$(run "$np" write --size $((mib << 20)) --reps 3 2>/dev/null | grep BENCH)
    raw=$(echo "$out" | awk '/checkpoint raw/ {print $5}')
    scr=$(echo "$out" | awk '/checkpoint scr/ {print $5}')
    lose="n1"
    [ "$scheme" = RS ] && lose="n1 n3"
    [ "$scheme" = SINGLE ] && lose=""
    for n in $lose; do rm -rf "$sim/nodes/$n"; done
    rst=$(run "$np" restart --size $((mib << 20)) 2>/dev/null | awk '/restart scr/ {print $5}')
    awk -v np="$np" -v mib="$mib" -v s="$scheme" -v raw="$raw" -v scr="$scr" -v lose="${lose:-nothing}" -v rst="$rst" 'BEGIN {
      printf "%d ranks x %3d MiB %-8s checkpoint raw %.3f s  scr %.3f s  ratio %.2f | restart after losing [%s] %.3f s = %.2fx raw write\n",
        np, mib, s, raw, scr, raw / scr, lose, rst, rst / raw }'
  done
done
