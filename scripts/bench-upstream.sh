#!/usr/bin/env bash
# Benchmark (not a test): this library side by side with C SCR 3.1 (issue 27). SCR 3.1's own
# examples/test_api.c (with its test_common.c) is compiled unchanged twice, against C SCR's
# libscr.so and against ours (the release build, or SCR_BENCH_LIBDIR), and both run on the
# simulated cluster (scripts/sim-node.sh: 4 ranks on nodes n0..n3, node storage in /dev/shm),
# with the same environment, C first in odd rounds and ours first in even ones:
#
#   checkpoint  test_api -s <MiB>MB -t 3: its priming checkpoint, then 3 timed ones (its
#     "Completed checkpoint" lines, SCR_Start_output..SCR_Complete_output with the write and
#     fsync, rank 0's clock). Per round: the median of the 3. Schemes: SINGLE (default
#     settings), SINGLE with SCR_CRC_ON_COPY=0 (equal work: C SCR computes no CRC32 on copy by
#     default), PARTNER, XOR (sets of 4), RS (sets of 4, SCR_SET_FAILURES=2).
#   rebuild     after a PARTNER / XOR / RS round, node n1 (RS: n1 and n3) is lost and test_api
#     -t 0 restarts: SCR_Init's time (its "Init: ... Max" line) rebuilds the lost ranks' files.
#   restart     after a SINGLE round nothing is lost: SCR_Init's time on the restart from cache.
#
# Both libraries read the same variables: SCR_PREFIX, SCR_CACHE_BASE, SCR_CNTL_BASE,
# SCR_COPY_TYPE, SCR_SET_SIZE=4, SCR_FLUSH=0 (no flush), SCR_CACHE_BYPASS=0 (C SCR 3.1's
# default is 1: no cache), everything else at its default (SCR_CACHE_SIZE=1 in both). Prints per figure the median [min-max] over the rounds of the
# speed ratio C time / our time (> 1: this library is faster), each side's median time, and the
# load average before and after.
#
# Usage: scripts/bench-upstream.sh SCR_C_PREFIX [MiB per rank, default 256] [rounds, default 3]
#   SCR_C_PREFIX is where C SCR 3.1 is installed (lib/libscr.so, include/scr.h); test_api.c is
#   taken from SCR_C_PREFIX/share/scr/examples, or from SCR_C_SRC/examples (its source tree).
#   Without C SCR there the script says so and exits 0. SCHEMES="XOR RS" runs a subset.
# Figures are in BENCHMARKS.md; how C SCR 3.1 was built for them is described there.
set -euo pipefail
cprefix=${1:?usage: scripts/bench-upstream.sh SCR_C_PREFIX [MiB per rank] [rounds]}
cprefix=$(realpath -m "$cprefix")
mib=${2:-256}
rounds=${3:-3}
if [ ! -e "$cprefix/lib/libscr.so" ] || [ ! -f "$cprefix/include/scr.h" ]; then
  echo "bench-upstream.sh: no C SCR under $cprefix (lib/libscr.so and include/scr.h): skipped"
  exit 0
fi
csrc=""
for d in "$cprefix/share/scr/examples" "${SCR_C_SRC:-/nonexistent}/examples"; do
  if [ -f "$d/test_api.c" ] && [ -f "$d/test_common.c" ]; then csrc=$d; break; fi
done
if [ -z "$csrc" ]; then
  echo "bench-upstream.sh: no test_api.c and test_common.c of C SCR in $cprefix/share/scr/examples" \
    "(set SCR_C_SRC to its source tree): skipped"
  exit 0
fi
. "$(dirname "$0")/common.sh"
np=4
map=n0,n1,n2,n3
work=$(mktemp -d /tmp/scr-upstream.XXXXXX)
sim=$(mktemp -d /dev/shm/scr-upstream.XXXXXX)
trap 'rm -rf "$work" "$sim"' EXIT
mpicc -O2 -I "$cprefix/include" -I "$csrc" "$csrc/test_api.c" "$csrc/test_common.c" \
  -L "$cprefix/lib" -lscr -Wl,-rpath,"$cprefix/lib" -o "$work/test_api.c"
mpicc -O2 -I "$repo/include" -I "$csrc" "$csrc/test_api.c" "$csrc/test_common.c" \
  -L "$libdir" -lscr -Wl,-rpath,"$libdir" -o "$work/test_api.rs"
# The same MPI transport for both: single-copy shared-memory transfers, as bench-redundancy.sh.
export OMPI_MCA_btl_vader_single_copy_mechanism=cma
export SIM_NODE_ROOT=$sim SIM_NODE_MAP=$map SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$sim/node/cache
# SCR_CACHE_BYPASS=0: C SCR 3.1 writes straight to the prefix by default (no cache, no
# redundancy); this library caches by default.
export SCR_CNTL_BASE=$sim/node/cntl SCR_FLUSH=0 SCR_SET_SIZE=4 SCR_CACHE_BYPASS=0 USER=${USER:-$(id -un)}
unset SCR_CONF_FILE SCR_CACHE_SIZE SCR_CRC_ON_COPY SCR_COPY_TYPE SCR_SET_FAILURES
# run IMPL ARGS...: test_api of IMPL (c or rs) on the simulated cluster, output in $work/out
run() {
  local impl=$1
  shift
  (cd "$work/prefix" && mpirun -np "$np" "$repo/scripts/sim-node.sh" "$work/test_api.$impl" "$@") \
    >"$work/out" 2>&1 || { echo "bench-upstream.sh: test_api ($impl) $* failed:" >&2; tail -20 "$work/out" >&2; exit 1; }
}
# record FIGURE IMPL: the checkpoint time of the last run (median of its timed checkpoints)
record_ckpt() {
  awk '/^Completed checkpoint/ { n++; if (n > 1) print $4 }' "$work/out" | sort -g |
    awk -v f="$1" -v i="$2" '{ v[NR] = $1 } END { if (NR) print "T", f, i, v[int((NR + 1) / 2)] }' >>"$work/times"
}
# record_init FIGURE IMPL: SCR_Init's slowest rank in the last run, which must have restarted
record_init() {
  grep -q '^Restarting from checkpoint named' "$work/out" && ! grep -q 'did not find its checkpoint' "$work/out" || {
    echo "bench-upstream.sh: test_api ($2) did not restart for $1:" >&2; tail -20 "$work/out" >&2; exit 1; }
  awk -v f="$1" -v i="$2" '/^Init: / { print "T", f, i, $6 }' "$work/out" >>"$work/times"
}
one() { # one IMPL SCHEME
  local impl=$1 scheme=$2 lose=""
  rm -rf "$sim/nodes" "$work/prefix" && mkdir -p "$work/prefix"
  case $scheme in
    SINGLE_CRC0) export SCR_COPY_TYPE=SINGLE SCR_CRC_ON_COPY=0 ;;
    RS) export SCR_COPY_TYPE=RS SCR_SET_FAILURES=2 ;;
    *) export SCR_COPY_TYPE=$scheme ;;
  esac
  run "$impl" -s "${mib}MB" -t 3
  record_ckpt "ckpt_${scheme,,}" "$impl"
  case $scheme in PARTNER | XOR) lose=n1 ;; RS) lose="n1 n3" ;; esac
  for n in $lose; do rm -rf "${sim:?}/nodes/$n"; done
  run "$impl" -s "${mib}MB" -t 0
  if [ -n "$lose" ]; then record_init "rebuild_${scheme,,}" "$impl"; else record_init "restart_${scheme,,}" "$impl"; fi
  unset SCR_COPY_TYPE SCR_CRC_ON_COPY SCR_SET_FAILURES
}
echo "== C SCR: $cprefix (test_api.c from $csrc); ours: $libdir"
machine
for i in $(seq "$rounds"); do
  if [ $((i % 2)) = 1 ]; then order="c rs"; else order="rs c"; fi
  for scheme in ${SCHEMES:-SINGLE SINGLE_CRC0 PARTNER XOR RS}; do
    for impl in $order; do one "$impl" "$scheme"; done
  done
  echo "   round $i done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "== $np ranks ($map) x $mib MiB, $rounds rounds; speed ratio = C time / our time (> 1: we are faster)"
printf "  %-22s %-26s %12s %12s\n" figure "ratio median [min-max]" "C median s" "ours median s"
for f in $(awk '!seen[$2]++ { print $2 }' "$work/times"); do
  # pair the rounds in order: the k-th C time with the k-th time of ours
  awk -v f="$f" '$2 == f && $3 == "c" { c[++nc] = $4 } $2 == f && $3 == "rs" { r[++nr] = $4 }
    END { for (k = 1; k <= nc && k <= nr; k++) print c[k] / r[k], c[k], r[k] }' "$work/times" >"$work/pairs"
  med() { cut -d' ' -f"$1" "$work/pairs" | sort -g | awk '{ v[NR] = $1 } END { printf "%s %s %s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'; }
  read -r rm rlo rhi <<<"$(med 1)"
  read -r cm _ _ <<<"$(med 2)"
  read -r om _ _ <<<"$(med 3)"
  printf "  %-22s %6.2f [%.2f-%.2f]%8s %12.4f %12.4f\n" "$f" "$rm" "$rlo" "$rhi" "" "$cm" "$om"
done
machine
