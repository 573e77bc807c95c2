#!/usr/bin/env bash
# Benchmark (not a test): a file rank 0 wrote, read at restart by all 4 ranks, 3 of them on
# other nodes of the simulated cluster (scripts/sim-node.sh; node storage in /dev/shm, prefix
# on the disk in /tmp), by the three ways SCR_Route_file can reach it:
#   mpi     the checkpoint is only in cache (SCR_FLUSH=0): the route fails, SCR_Complete_restart
#           copies the file over MPI to the 3 nodes, the second attempt reads it there
#   prefix  the checkpoint is in the prefix too (SCR_FLUSH=1): each of the 3 reads it there,
#           after checking its size and CRC32
#   local   reference, the file in reach: the 4 ranks on one node read it from rank 0's cache
# for a small header (4 KiB; each rank also reads its own 4 KiB file) and a large file (every
# rank reads rank 0's 64 MiB file and the header). Figure: the restart loop of
# examples/c/elastic.c, first SCR_Have_restart to the successful SCR_Complete_restart, slowest
# rank; the three cases alternate, REPS times (default 5); median [min-max] is printed.
. "$(dirname "$0")/common.sh"
work=$(mktemp -d /tmp/scr-bench.XXXXXX)
sim=$(mktemp -d /dev/shm/scr-sim.XXXXXX)
trap 'rm -rf "$work" "$sim"' EXIT
build_example elastic "$work/elastic"
export OMPI_MCA_btl_vader_single_copy_mechanism=cma
export SCR_COPY_TYPE=SINGLE SCR_CACHE_SIZE=1
reps=${REPS:-5}

# run CASE ARGS...: elastic with 4 ranks in CASE's own prefix and node storage
run() {
  local case=$1
  shift
  mkdir -p "$work/$case"
  if [ "$case" = local ]; then
    (cd "$work/$case" && SCR_PREFIX=$work/$case SCR_CACHE_BASE=$sim/$case/cache SCR_CNTL_BASE=$sim/$case/cntl \
      SCR_FLUSH=0 mpirun -np 4 "$work/elastic" "$@")
  else
    local flush=0
    [ "$case" = prefix ] && flush=1
    (cd "$work/$case" && SCR_PREFIX=$work/$case SIM_NODE_ROOT=$sim/$case SIM_NODE_MAP=n0,n1,n2,n3 \
      SCR_CACHE_BASE=$sim/$case/node/cache SCR_CNTL_BASE=$sim/$case/node/cntl SCR_FLUSH=$flush \
      mpirun -np 4 "$repo/scripts/sim-node.sh" "$work/elastic" "$@")
  fi
}

# stats: median [min-max] of the numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f s [%.3f-%.3f]", v[int((NR + 1) / 2)], v[1], v[NR] }'; }

uptime
for size in header large; do
  if [ "$size" = header ]; then args=(--size 4096 --header-size 4096); else args=(--size $((64 << 20)) --read rank0); fi
  rm -rf "$work"/{mpi,prefix,local} "$sim"/{mpi,prefix,local}
  for case in mpi prefix local; do
    run "$case" "${args[@]}" --steps 1 >/dev/null 2>&1
  done
  for case in mpi prefix local; do : >"$work/$case.secs"; done
  for _ in $(seq "$reps"); do
    for case in mpi prefix local; do
      out=$(run "$case" "${args[@]}" --steps 0 --time 2>/dev/null)
      echo "$out" | grep -q '^RESTARTED ckpt.1' || { echo "$case: no restart: $out" >&2; exit 1; }
      attempts=$(echo "$out" | grep -c '^ATTEMPT')
      echo "$out" | awk '/^RESTART_SECS/ {print $2}' >>"$work/$case.secs"
      echo "$attempts" >"$work/$case.attempts"
    done
  done
  printf '%-6s' "$size"
  for case in mpi prefix local; do
    printf '  %s %s (%s attempt(s))' "$case" "$(stats <"$work/$case.secs")" "$(cat "$work/$case.attempts")"
  done
  echo
done
