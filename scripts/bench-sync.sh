#!/usr/bin/env bash
# Sync-point cost in transparent mode, 2 ranks, patterns set and nothing written (issue targets
# in brackets): the latency of world collectives the preload makes sync points, preloaded vs
# plain:
#   MPI_Allreduce of 1 double (SUM) on MPI_COMM_WORLD: carries the agreement   [ratio <= 1.2]
#   MPI_Barrier on MPI_COMM_WORLD: replaced by the agreement                    [ratio <= 1.2]
#   MPI_Allreduce of 1 double on a duplicate of MPI_COMM_WORLD (congruent)      [ratio <= 1.2]
#   MPI_Allreduce of 1024 doubles (8 KiB, above the 512-byte limit): followed by a separate
#     agreement (reported, no target)
#   stat of a plain file in the prefix by its absolute path (OpenFOAM's dictionaries at every
#     time step; no target)
#   stat of an absent file below a pattern's directory by a relative path with a `.` component
#     (`./ckpt.q<rank>/x.EXIT`: Quantum ESPRESSO's exit file, at every SCF iteration; no target)
# CONTROL=1 adds a second plain run to each pair of the first part and prints the plain/plain
# ratio under each row: the noise floor its ratio must be read against.
# The second part times the first three again in one run each, in alternating blocks through
# the preload's hook and as MPI's own PMPI_ function (found in libmpi), against a plain run of
# the same as the control: both sides share the placement of the ranks on the cores, which
# moves a separate run's latency by up to 2x on a 2-vCPU VM. It leaves out what loading the
# library changes for the whole run; the first part has it.
# Each figure alternates the plain and the preloaded run PAIRS times (default 7) in this one
# invocation and reports the median, min and max of the per-pair ratio, with the medians of
# both sides (microseconds per call, the slowest rank's mean over N calls after 1,000 not
# timed). The release build of libscr_preload.so is reused when it is newer than every source
# file; otherwise it is built. SCR_BENCH_BEFORE=<another libscr_preload.so> (e.g. a worktree's
# release build of an earlier commit) adds its run to each pair (plain, this, before) and
# prints its median and the median of the per-pair ratio this/before.
# Usage: scripts/bench-sync.sh [calls] [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/mpienv.sh
calls=${1:-20000}
pairs=${2:-7}
lib=$PWD/target/release/libscr_preload.so
if [ -f "$lib" ] && [ -z "$(find src preload/src Cargo.toml Cargo.lock preload/Cargo.toml -newer "$lib" -print -quit)" ]; then
  echo "reusing $lib"
else
  cargo build --release --quiet -p scr-preload
fi
work=$(mktemp -d /dev/shm/scr-bench-sync.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/bench" examples/preload/bench_preload.c -ldl 2>/dev/null
before=${SCR_BENCH_BEFORE:-}
unset SCR_BENCH_BEFORE # not passed on: the library warns about unknown SCR_* variables
control=${CONTROL:-0}
if [ -n "$before" ] && [ ! -f "$before" ]; then
  echo "SCR_BENCH_BEFORE=$before: no such file" >&2
  exit 2
fi
export SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$work/cache SCR_CNTL_BASE=$work/cntl SCR_JOB_ID=bench
export SCR_PRELOAD_PATTERNS='ckpt.*/**' SCR_FLUSH=0 SCR_COPY_TYPE=SINGLE
mkdir -p "$SCR_PREFIX"

run() { # run <preload 0|1|2 (2: SCR_BENCH_BEFORE's library)> args... -> the RESULT value
  local pre=$1 l=$lib
  shift
  [ "$pre" = 2 ] && l=$before
  if [ "$pre" = 0 ]; then mpirun -np 2 "$work/bench" "$@"; else mpirun -np 2 -x LD_PRELOAD="$l" "$work/bench" "$@"; fi |
    awk '/^RESULT/ { print $3 }'
}

# pairs <name> <args...>: plain, then preloaded, PAIRS times; median of each side and of the ratio
pairs() {
  local name=$1
  shift
  for _ in $(seq "$pairs"); do
    rm -rf "$work/cache" "$work/cntl"
    x=$(run 0 "$@")
    y=$(run 1 "$@")
    z=-
    [ -n "$before" ] && z=$(run 2 "$@")
    w=-
    [ "$control" = 1 ] && w=$(run 0 "$@")
    echo "$x $y $z $w"
  done | awk -v name="$name" '
    function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    { n++; a[n] = $1; b[n] = $2; r[n] = $2 / $1; if ($3 != "-") { nc++; c[n] = $3; q[n] = $2 / $3 } if ($4 != "-") { nk++; k[n] = $4 / $1 } }
    END { ma = med(a, n); mb = med(b, n); mr = med(r, n); lo = r[1]; hi = r[n]
          printf "  %-44s %10.3f %10.3f   ratio %.3f (min %.3f, max %.3f, %d pairs)\n", name, ma, mb, mr, lo, hi, n
          if (nc) { mc = med(c, n); mq = med(q, n); printf "  %-44s %10s %10.3f   this/before %.3f (min %.3f, max %.3f)\n", "  before", "", mc, mq, q[1], q[n] }
          if (nk) { mk = med(k, n); printf "  %-44s %10s %10s   control plain/plain %.3f (min %.3f, max %.3f)\n", "", "", "", mk, k[1], k[n] } }'
}

# inrun <name> <args...>: the same collective through the preload's hook and as MPI's own
# PMPI_ function in alternating blocks of 1,000 calls of one run (bench_preload's `paired`), so
# that both sides share the run's placement of the ranks and the VM's mood; a plain run of the
# same (both blocks the same function) is the control. PAIRS runs of each; medians of the
# per-run ratios.
inrun() {
  local name=$1
  shift
  for _ in $(seq "$pairs"); do
    rm -rf "$work/cache" "$work/cntl"
    x=$(mpirun -np 2 "$work/bench" "$@" paired | awk '/^RESULT/ { print $3 / $5 }')
    y=$(mpirun -np 2 -x LD_PRELOAD="$lib" "$work/bench" "$@" paired | awk '/^RESULT/ { print $3, $5 }')
    echo "$x $y"
  done | awk -v name="$name" '
    function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    { n++; c[n] = $1; h[n] = $2; p[n] = $3; r[n] = $2 / $3 }
    END { mc = med(c, n); mh = med(h, n); mp = med(p, n); mr = med(r, n)
          printf "  %-44s %10.3f %10.3f   ratio %.3f (min %.3f, max %.3f; control %.3f [%.3f-%.3f], %d runs)\n", name, mp, mh, mr, r[1], r[n], mc, c[1], c[n], n }'
}

echo "sync points in transparent mode, 2 ranks, $calls calls per run; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "  %-44s %10s %10s   %s\n" "measurement (us per call)" "plain" "preloaded" "figure"
pairs "allreduce 1 double, world" allreduce "$SCR_PREFIX" "$calls" 1
pairs "barrier, world" barrier "$SCR_PREFIX" "$calls"
pairs "allreduce 1 double, dup of world" allreduce "$SCR_PREFIX" "$calls" 1 dup
pairs "allreduce 1024 doubles, world" allreduce "$SCR_PREFIX" "$((calls / 10))" 1024
pairs "stat, prefix, no pattern" stat "$SCR_PREFIX" "$((calls * 10))"
pairs "stat ./ckpt.q/x.EXIT, absent" inquire "$SCR_PREFIX" "$((calls * 5))"
echo "in one run, through the hook / MPI's own function (plain: the control)"
printf "  %-44s %10s %10s   %s\n" "measurement (us per call)" "MPI's own" "hooked" "figure"
inrun "allreduce 1 double, world" allreduce "$SCR_PREFIX" "$calls" 1
inrun "barrier, world" barrier "$SCR_PREFIX" "$calls"
inrun "allreduce 1 double, dup of world" allreduce "$SCR_PREFIX" "$calls" 1 dup
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); targets: ratio <= 1.2 for the first three of each part"
