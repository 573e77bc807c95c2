#!/usr/bin/env bash
# Run time of real applications with and without transparent mode, 4 ranks, prefix and cache in
# /dev/shm (issue 22 item 7 target: <= 2% more with the preload):
#   OpenFOAM: icoFoam's lid-driven cavity (Debian's openfoam-examples) decomposed into 4,
#     FOAM_STEPS time steps (default 1000; deltaT 0.001), a time directory every FOAM_EVERY
#     steps (default 100: 10 checkpoints, one per ~0.2 s of computation, far more often than a
#     real run checkpoints), pattern 'processor*/[0-9]*/**' (config/README.md's); ~60 world
#     allreduces per step, mostly one double SUM
#     FOAM_CELLS=<n> (default 20, the tutorial's) cells along each side of the cavity: 20 makes
#     a time step of ~0.3 ms with 2 ranks, a mesh far smaller than a real case's and so the
#     per-step sync points weigh as they would not in one; 80 (Courant number 0.8 at deltaT
#     0.001) makes a step of ~10 ms
#   Quantum ESPRESSO: pw.x molecular dynamics of 2 silicon atoms (quantum-espresso-data's
#     pseudopotential), NSTEP steps (default 10), restart files each step (pattern 'out/**')
# NP=<ranks> (default 4; on a 2-core machine 4 ranks are oversubscribed, and Open MPI's
# yielding ranks make single runs spread by +-15%: NP=2 measures without oversubscription);
# QE_ECUT=<Ry> (default 12) and QE_KPOINTS="<n n n>" (default "2 2 2"): the defaults make an MD
# step of ~14 ms with 2 ranks and QE writes its restart files several times per step; 30 and
# "4 4 4" make steps of ~150 ms and larger files.
# APPS="foam qe" (default) or one of them: the applications timed.
# PATTERNS=<SCR_PRELOAD_PATTERNS> replaces both applications' pattern (one that matches no file,
# such as 'none/**', measures the sync points and the hooks without checkpoints).
# Each run starts from a fresh copy of the case (outside the timed region) and fresh SCR
# directories; plain and preloaded runs alternate RUNS times (default 5), in reversed order
# every other round (so neither side always runs first); printed: the median, min and max wall
# time of each side and the median, min and max of the per-pair ratio.
# CONTROL=1 adds as many plain/plain pairs, in the same alternation, and prints their ratio:
# the noise floor a preloaded/plain ratio must be read against (an A/A test).
# SCR_BENCH_BEFORE=<another libscr_preload.so> (e.g. a worktree's release build of the previous
# commit) adds a third run to each round, with that library; odd rounds run plain, before,
# this, even rounds this, before, plain. Its figures are printed beside this build's, with the
# per-round ratio of the two.
# STDOUT=file (default) sends each rank's standard output to a file of its own (through a
# `sh -c` wrapper both sides run; the preloaded side's sets LD_PRELOAD for the application only);
# STDOUT=mpirun leaves it to mpirun, as a plain `mpirun ... > log` does: every line of it then
# travels through a pseudo-terminal to mpirun, and on this 2-vCPU VM each write may wake a
# kernel worker on the other vCPU (an inter-processor interrupt, a VM exit). icoFoam writes
# 11,000 lines per rank in 1000 steps: through mpirun its runs spread by 15-35% whatever the
# preload, to files by under 1% (BENCHMARKS.md, 2026-12-06).
# TIMING=1 adds, after each application's rounds, one more preloaded run with
# SCR_PRELOAD_TIMING=1 and prints its table: the time each hook and the sync points spent in
# SCR, per hook over every rank (README, transparent mode).
# TIMING=<n> (n > 1) with SCR_BENCH_BEFORE: n rounds of two SCR_PRELOAD_TIMING=1 runs, that
# library's and this one's (in reversed order every other round), and for each the median, min
# and max of the slowest rank's milliseconds in the completions, in all sync points and in the
# hooks' sum. The time in SCR spreads far less than the wall clock on this VM, so it shows a
# change to the library's own cost that the run-time ratios cannot resolve.
# Needs: openfoam openfoam-examples quantum-espresso quantum-espresso-data (apt).
# Usage: scripts/bench-apps.sh [runs] [qe md steps]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mpienv.sh
runs=${1:-5}
nstep=${2:-10}
np=${NP:-4}
ecut=${QE_ECUT:-12}
kpoints=${QE_KPOINTS:-2 2 2}
apps=" ${APPS:-foam qe} "
stdout=${STDOUT:-file}
split="$np 1 1" # the cavity's blocks per direction
[ "$np" = 4 ] && split="2 2 1"

lib=$PWD/target/release/libscr_preload.so
if [ -f "$lib" ] && [ -z "$(find src preload/src Cargo.toml Cargo.lock preload/Cargo.toml -newer "$lib" -print -quit)" ]; then
  echo "reusing $lib"
else
  cargo build --release --quiet -p scr-preload
fi
work=$(mktemp -d /dev/shm/scr-bench-apps.XXXXXX)
trap 'rm -rf "$work"' EXIT
export FOAM_ETC=/usr/share/openfoam/etc WM_PROJECT_DIR=/usr/share/openfoam
export SCR_CACHE_BASE=$work/cache SCR_CNTL_BASE=$work/cntl SCR_JOB_ID=bench SCR_FLUSH=0 SCR_COPY_TYPE=SINGLE

# the cases, prepared once
cavity=/usr/share/doc/openfoam-examples/examples/incompressible/icoFoam/cavity/cavity
mkdir -p "$work/foam" "$work/qe"
cp -a "$cavity/." "$work/foam/"
foam_steps=${FOAM_STEPS:-1000}
foam_every=${FOAM_EVERY:-100}
foam_cells=${FOAM_CELLS:-20}
case $foam_cells in '' | *[!0-9]*) echo "FOAM_CELLS=$foam_cells: a number of cells is expected" >&2; exit 2 ;; esac
sed -i -e 's/^deltaT .*/deltaT          0.001;/' -e "s/^endTime .*/endTime         $(awk -v n="$foam_steps" 'BEGIN { print n / 1000 }');/" \
  -e "s/^writeInterval .*/writeInterval   $foam_every;/" "$work/foam/system/controlDict"
printf '%s\n' 'FoamFile { version 2.0; format ascii; class dictionary; object decomposeParDict; }' \
  "numberOfSubdomains $np;" 'method simple;' "coeffs { n ($split); }" >"$work/foam/system/decomposeParDict"
sed -i "s/(20 20 1)/($foam_cells $foam_cells 1)/" "$work/foam/system/blockMeshDict"
grep -q "($foam_cells $foam_cells 1)" "$work/foam/system/blockMeshDict" || { echo "FOAM_CELLS: the cavity's blockMeshDict has no (20 20 1) block" >&2; exit 2; }
(cd "$work/foam" && blockMesh >/dev/null && decomposePar >/dev/null)
cat >"$work/qe/md.in" <<EOF
&control
  calculation = 'md'
  prefix = 'si'
  outdir = './out'
  pseudo_dir = '/usr/share/espresso/pseudo'
  nstep = $nstep
  dt = 20
/
&system
  ibrav = 2, celldm(1) = 10.2, nat = 2, ntyp = 1, ecutwfc = $ecut
/
&electrons
  conv_thr = 1.0d-8
/
&ions
/
ATOMIC_SPECIES
 Si 28.086 Si.pz-vbc.UPF
ATOMIC_POSITIONS alat
 Si 0.00 0.00 0.00
 Si 0.27 0.25 0.25
K_POINTS automatic
 $kpoints 0 0 0
EOF

before=${SCR_BENCH_BEFORE:-}
unset SCR_BENCH_BEFORE # not passed on: the library warns about unknown SCR_* variables
if [ -n "$before" ] && [ ! -f "$before" ]; then
  echo "SCR_BENCH_BEFORE=$before: no such file" >&2
  exit 2
fi
case ${TIMING:-0} in
  0 | 1) ;;
  *[!0-9]*) echo "TIMING=$TIMING: 0, 1 or a number of rounds is expected" >&2; exit 2 ;;
  *) [ -n "$before" ] || { echo "TIMING=$TIMING (rounds of both libraries) needs SCR_BENCH_BEFORE=<the other libscr_preload.so>" >&2; exit 2; } ;;
esac

# one <app> <preload 0|1|2|3|4> -> wall seconds of one run in a fresh copy (2: SCR_BENCH_BEFORE's
# library; 3: this one with SCR_PRELOAD_TIMING=1; 4: SCR_BENCH_BEFORE's with it)
one() {
  local app=$1 pre=$2 run=$work/run lib=$lib
  if [ "$pre" = 2 ] || [ "$pre" = 4 ]; then lib=$before; fi
  rm -rf "$run"
  # (a plain run leaves the last preloaded run's cache for `same` to count)
  [ "$pre" = 0 ] || rm -rf "$work/cache" "$work/cntl"
  cp -a "$work/$app" "$run"
  local cmd pattern
  if [ "$app" = foam ]; then cmd=(icoFoam -parallel); pattern='processor*/[0-9]*/**'; else cmd=(pw.x -in md.in); pattern='out/**'; fi
  pattern=${PATTERNS:-$pattern}
  local env=() wrap=()
  if [ "$stdout" = file ]; then
    # each rank's standard output to a file of its own, by a shell both sides run: it sets
    # LD_PRELOAD for the application only (the shell itself runs without the library)
    wrap=(sh -c 'LD_PRELOAD=$BENCH_PRELOAD exec "$@" >"$BENCH_RANK_OUT.$OMPI_COMM_WORLD_RANK"' sh)
    local preload=
    [ "$pre" != 0 ] && preload=$lib
    env=(-x BENCH_RANK_OUT="$work/out.$app.$pre.rank" -x BENCH_PRELOAD="$preload")
  elif [ "$pre" != 0 ]; then
    env=(-x LD_PRELOAD="$lib")
  fi
  [ "$pre" != 0 ] && env+=(-x SCR_PREFIX="$run" -x SCR_PRELOAD_PATTERNS="$pattern")
  if [ "$pre" = 3 ] || [ "$pre" = 4 ]; then env+=(-x SCR_PRELOAD_TIMING=1); fi
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$run" && mpirun -np "$np" "${env[@]}" -x FOAM_ETC -x WM_PROJECT_DIR "${wrap[@]}" "${cmd[@]}" >"$work/out.$app.$pre" 2>&1) ||
    { echo "$app (preload $pre) failed:" >&2; tail -20 "$work/out.$app.$pre" >&2; exit 1; }
  t1=$(date +%s.%N)
  # (rank 0's output joins mpirun's, for `same`)
  if [ "$stdout" = file ]; then cat "$work/out.$app.$pre.rank.0" >>"$work/out.$app.$pre"; fi
  echo "$t0 $t1" | awk '{ printf "%.3f", $2 - $1 }'
}

pairs() { # pairs <app> <name> [second side: 1 (default) or 0]
  if [ -n "$before" ]; then
    triples "$@"
    return
  fi
  local b=${3:-1} # the second side: 1 (preloaded), or 0 for the control
  for i in $(seq "$runs"); do
    if [ $((i % 2)) = 1 ]; then x=$(one "$1" 0); y=$(one "$1" "$b"); else y=$(one "$1" "$b"); x=$(one "$1" 0); fi
    echo "$x $y"
  done | awk -v name="$2" '
    function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    { n++; a[n] = $1; b[n] = $2; r[n] = $2 / $1 }
    END { ma = med(a, n); mb = med(b, n); mr = med(r, n)
          printf "  %-34s %8.2f (%.2f-%.2f) %8.2f (%.2f-%.2f)   ratio %.3f (min %.3f, max %.3f, %d pairs)\n",
                 name, ma, a[1], a[n], mb, b[1], b[n], mr, r[1], r[n], n }'
}

triples() { # triples <app> <name>: plain, SCR_BENCH_BEFORE's library and this one, in turn
  for i in $(seq "$runs"); do
    if [ $((i % 2)) = 1 ]; then x=$(one "$1" 0); y=$(one "$1" 2); z=$(one "$1" 1); else z=$(one "$1" 1); y=$(one "$1" 2); x=$(one "$1" 0); fi
    echo "$x $y $z"
  done | awk -v name="$2" '
    function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    { n++; p[n] = $1; rb[n] = $2 / $1; ra[n] = $3 / $1; d[n] = $3 / $2 }
    END { mp = med(p, n); mb = med(rb, n); ma = med(ra, n); md = med(d, n)
          printf "  %-34s plain %.2f s; before/plain %.3f (%.3f-%.3f); this/plain %.3f (%.3f-%.3f); this/before %.3f (%.3f-%.3f), %d rounds\n",
                 name, mp, mb, rb[1], rb[n], ma, ra[1], ra[n], md, d[1], d[n], n }'
}

echo "real applications, $np ranks, /dev/shm; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$before" ]; then
  echo "  (before: $before; this: $lib; ratios: median (min-max) of the per-round ratios)"
else
  printf "  %-34s %21s %21s   %s\n" "run (wall s: median (min-max))" "plain" "preloaded" "preloaded/plain"
fi
same() { # same <app> <grep pattern>: the last runs with and without the preload printed the same
  if diff <(grep -E "$2" "$work/out.$1.0") <(grep -E "$2" "$work/out.$1.1") >/dev/null; then
    echo "  ($1: the same $(grep -cE "$2" "$work/out.$1.0") solver lines with and without the preload; $(find "$work/cache" -type f | wc -l) files in cache, the last run's newest dataset id $(ls -d "$work"/cache/*/*/scr.dataset.* 2>/dev/null | sed 's/.*scr[.]dataset[.]//' | sort -n | tail -1))"
  else
    echo "  ($1: SOLVER OUTPUT DIFFERS with the preload)"
  fi
}
# in_scr <log>: the slowest rank's ms of a SCR_PRELOAD_TIMING table: completions, sync points, all rows
in_scr() {
  awk '/transparent mode timing/ { p = 1; next }
       p == 1 { p = 2; next }
       p == 2 && !/[(]rank [0-9]+[)]$/ { p = 3 }
       p == 2 && /MPI sync point: completion/ { c = $(NF - 2) }
       p == 2 && /^ *MPI sync point  / { s = $(NF - 2) }
       p == 2 && !/MPI sync point:/ { all += $(NF - 2) }
       END { if (!p) { print "no SCR_PRELOAD_TIMING table in " FILENAME > "/dev/stderr"; exit 1 }
             printf "%s %s %.3f\n", c + 0, s + 0, all }' "$1"
}
timing_ab() { # timing_ab <app> <rounds>: SCR_PRELOAD_TIMING=1 runs of both libraries, alternating
  for i in $(seq "$2"); do
    if [ $((i % 2)) = 1 ]; then one "$1" 4 >/dev/null; b=$(in_scr "$work/out.$1.4"); one "$1" 3 >/dev/null; t=$(in_scr "$work/out.$1.3")
    else one "$1" 3 >/dev/null; t=$(in_scr "$work/out.$1.3"); one "$1" 4 >/dev/null; b=$(in_scr "$work/out.$1.4"); fi
    echo "$b $t"
  done | awk '
    function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
                                    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
    { k++; for (f = 1; f <= 6; f++) v[f, k] = $f }
    END { split("completions,sync points,all hooks", name, ",")
          for (f = 1; f <= 3; f++) { for (s = 0; s <= 3; s += 3) { for (i = 1; i <= k; i++) a[i] = v[f + s, i]; m[s] = med(a, k); lo[s] = a[1]; hi[s] = a[k] }
            printf "    %-14s before %8.1f (%.1f-%.1f)   this %8.1f (%.1f-%.1f)   this/before %.3f\n", name[f], m[0], lo[0], hi[0], m[3], lo[3], hi[3], m[0] ? m[3] / m[0] : 0 } }'
}
timing() { # timing <app>: one more preloaded run with SCR_PRELOAD_TIMING=1, and its table
  local t=${TIMING:-0}
  if [ "$t" -gt 1 ] 2>/dev/null && [ -n "$before" ]; then
    echo "  ms in SCR, the slowest rank per row, median (min-max) of $t rounds with SCR_PRELOAD_TIMING=1:"
    timing_ab "$1" "$t"
    return 0
  fi
  [ "$t" = 1 ] || return 0
  echo "  one more preloaded run with SCR_PRELOAD_TIMING=1: $(one "$1" 3) s"
  awk '/transparent mode timing/ { p = 1; sub(/^.*transparent mode timing/, "transparent mode timing"); print "    " $0; next }
       p == 1 { p = 2; print "  " $0; next }
       p == 2 && /[(]rank [0-9]+[)]$/ { print "  " $0; next }
       p == 2 { exit }' "$work/out.$1.3"
}
control=${CONTROL:-0}
if [[ $apps == *" foam "* ]]; then
  pairs foam "icoFoam cavity $foam_cells^2, $foam_steps steps/$foam_every"
  same foam 'Solving for|Courant Number'
  if [ "$control" = 1 ]; then before='' pairs foam "  control: plain/plain" 0; fi
  timing foam
fi
if [[ $apps == *" qe "* ]]; then
  pairs qe "pw.x Si MD, ecut $ecut, k $kpoints, $nstep steps"
  same qe 'total energy|scf accuracy|Ekin|temperature'
  if [ "$control" = 1 ]; then before='' pairs qe "  control: plain/plain" 0; fi
  timing qe
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); target: ratio <= 1.02"
