# Sourced by demo.sh and the benchmarks: install what is missing, set the MPI environment, build
# the release library (cargo does nothing when it is current), and compile a C example
# against it. SCR_BENCH_LIBDIR=<dir with libscr.so> runs the benchmarks against that build
# instead (nothing is built): the same script compares two builds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
scripts/setup.sh
. scripts/mpienv.sh
libdir=${SCR_BENCH_LIBDIR:-$repo/target/release}
given_libdir=${SCR_BENCH_LIBDIR:-}
# not passed on: the library warns about every SCR_* variable that is not its parameter
unset SCR_BENCH_LIBDIR
if [ -z "$given_libdir" ]; then
  # cargo shows each crate it compiles; on a fresh machine the first build takes minutes.
  echo "== building scr-rs (release)" >&2
  cargo build --release -p scr
fi

# build_example NAME OUTPUT: compile examples/c/NAME.c against $libdir/libscr.so
build_example() {
  mpicc -O2 -Wall -I "$repo/include" "$repo/examples/c/$1.c" -L "$libdir" -lscr -Wl,-rpath,"$libdir" -o "$2"
}

# machine: one line saying when, where and under what load a measurement runs.
machine() {
  echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), library $libdir"
}

# summarize FILE: the RATIO lines of the benchmark programs in FILE as median, min and max per
# name (each ratio is one pair: our run and its raw limit, back to back), and the median of
# each TIME.
summarize() {
  local kind name
  for kind in RATIO TIME; do
    for name in $(awk -v k="$kind" '$1 == k && !seen[$2]++ { print $2 }' "$1"); do
      awk -v k="$kind" -v n="$name" '$1 == k && $2 == n { print $3 }' "$1" | sort -g |
        awk -v k="$kind" -v n="$name" '{ v[NR] = $1 } END {
          med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          if (k == "RATIO") printf "  %-26s median %6.3f   min %6.3f   max %6.3f   (%d pairs)\n", n, med, v[1], v[NR], NR
          else printf "  %-26s median %8.4f s (%d)\n", n " time", med, NR }'
    done
  done
}
