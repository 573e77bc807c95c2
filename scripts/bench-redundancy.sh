#!/usr/bin/env bash
# Benchmark (not a test): each redundancy scheme against the raw limit on the simulated
# cluster (scripts/sim-node.sh), node storage in /dev/shm, all on this machine's cores.
#
#   checkpoint: each pair writes the same bytes raw into the node's cache directory (deleting
#     the previous file outside the timed region) and then through SCR with the scheme
#     (SCR_CACHE_SIZE=1, encoding inside SCR_Complete_output); ratio = raw time / SCR time.
#     Pairs are GAP seconds apart (default 2, idle): the evicted checkpoint's background
#     deletion does not slow the next raw write.
#   rebuild: after each round's checkpoints the nodes listed are lost and the job restarts;
#     ratio = SCR_Init's time (rebuild of the lost ranks' files, and the CRC32 check of the
#     dataset offered) / the round's median raw write time.
#   restart: SCR_Init..SCR_Complete_restart (the data read included) / a plain read of the
#     same files right after.
#   floor_partner, floor_xor, floor_partner-rebuild, floor_xor-rebuild: each round also runs
#     examples/c/bench_floor.c, a minimal schedule of the scheme without SCR (write, then send
#     and XOR straight from mappings of the files, write the redundancy once; no CRC32, no
#     metadata; PARTNER's pipelined, XOR's not) against the raw write of its own run:
#     checkpoint ratio and rebuild / raw write time (rank 1, on n1, is the one rebuilt).
#
# Usage: scripts/bench-redundancy.sh [MiB per rank, default 256] [rounds, default 5]
#   SCHEMES="XOR RS" (default SINGLE PARTNER XOR RS); NP=8 MAP=n0,n0,n1,n1,n2,n2,n3,n3 for
#   another layout (default 4 ranks on nodes n0..n3). RS uses SET_FAILURES=2, sets of 4.
# Previous figures are in BENCHMARKS.md.
. "$(dirname "$0")/common.sh"
mib=${1:-256}
rounds=${2:-5}
np=${NP:-4}
map=${MAP:-n0,n1,n2,n3}
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
sim=$(mktemp -d /dev/shm/scr-sim.XXXXXX)
trap 'rm -rf "$work" "$sim"' EXIT
build_example bench_api "$work/bench_api"
mpicc -O2 -Wall "$repo/examples/c/bench_floor.c" -o "$work/bench_floor"
# Single-copy shared-memory transfers (process_vm_readv) for the set traffic; the tests keep
# the portable copy-in/copy-out default.
export OMPI_MCA_btl_vader_single_copy_mechanism=cma
export SIM_NODE_ROOT=$sim SIM_NODE_MAP=$map SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$sim/node/cache
export SCR_CNTL_BASE=$sim/node/cntl SCR_CACHE_BYPASS=0 SCR_FLUSH=0 SCR_CACHE_SIZE=1 SCR_SET_SIZE=4 SCR_SET_FAILURES=2
run() { (cd "$work/prefix" && mpirun -np "$np" "$repo/scripts/sim-node.sh" "$work/bench_api" "$@" --size $((mib << 20))) |
  grep -E '^(RATIO|TIME) '; }
machine
for scheme in ${SCHEMES:-SINGLE PARTNER XOR RS}; do
  case $scheme in SINGLE) lose="" ;; RS) lose="n1 n3" ;; *) lose="n1" ;; esac
  out=$work/$scheme
  for i in $(seq "$rounds"); do
    rm -rf "$sim"/nodes "$work/prefix" && mkdir -p "$work/prefix"
    SCR_COPY_TYPE=$scheme run write --reps 3 --gap "${GAP:-2}" >"$work/round"
    cat "$work/round" >>"$out"
    case $scheme in PARTNER | XOR)
      for mode in "${scheme,,}" "${scheme,,}-rebuild"; do
        (cd "$work/prefix" && mpirun -np "$np" "$repo/scripts/sim-node.sh" "$work/bench_floor" "$mode" \
          --size $((mib << 20)) --reps 3 --gap "${GAP:-2}" --piece "${SCR_MPI_BUF_SIZE:-262144}") |
          grep '^RATIO ' >>"$out"
      done ;;
    esac
    for n in $lose; do rm -rf "${sim:?}/nodes/$n"; done
    SCR_COPY_TYPE=$scheme run restart | tee -a "$out" >"$work/restart"
    # SCR_Init's time over this round's median raw write time
    raw=$(awk '$1 == "TIME" && $2 == "raw_write" { print $3 }' "$work/round" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    awk -v raw="$raw" '$1 == "TIME" && $2 == "init" { printf "RATIO init_over_raw_write %.4f\n", $3 / raw }' "$work/restart" >>"$out"
  done
  echo "== $np ranks ($map) x $mib MiB, $scheme, $rounds rounds, lost after each: ${lose:-nothing}"
  summarize "$out"
done
machine
