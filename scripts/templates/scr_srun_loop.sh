#!/bin/bash
# scr_srun_loop.sh: run an application under SCR with srun, relaunching it after a failure
# within the allocation (SCR user guide 2.8.4).
#   scr_srun_loop.sh [srun_options] <prog> [prog_args ...]
# Before each launch, scr_list_down_nodes lists the nodes that cannot take the run
# (SCR_EXCLUDE_NODES, nodes Slurm reports down, drained or gone from the job, and nodes an
# earlier launch of this script found down); srun leaves them out (--exclude), so spare nodes
# of the allocation take their place. After a run, scr_should_exit says whether to stop: the
# application finished, a halt condition holds (scr_halt, SCR_HALT_SECONDS), or too few
# usable nodes are left (SCR_MIN_NODES, else the last run's node count). At most SCR_RUNS
# launches (default 5; -1: no limit), SCR_LOOP_SLEEP seconds apart (default 60: time for
# the nodes of a failed run to clean up). At the end scr_postrun copies any dataset left
# only in cache to the prefix. The prefix is SCR_PREFIX, else the current directory. Start
# the batch job with `#SBATCH --no-kill` (user guide 2.8.3). srun gets --kill-on-bad-exit=1
# unless the options (-K..., --kill-on-bad-exit...) or SLURM_KILL_BAD_EXIT say otherwise:
# Slurm's default lets the other tasks of a step run on when one dies, and an MPI
# application's ranks then wait for the dead one until the allocation ends, leaving no time to
# relaunch.
# A template: copy and adapt it, or use it in place of srun in a batch script.
bindir="@BINDIR@"

if [ "${SCR_ENABLE:-1}" = "0" ]; then
  exec srun "$@"
fi
prefix="${SCR_PREFIX:-$PWD}"
runs="${SCR_RUNS:-5}"
pause="${SCR_LOOP_SLEEP:-60}"
kill="--kill-on-bad-exit=1"
[ -z "${SLURM_KILL_BAD_EXIT:-}" ] || kill=""
for a in "$@"; do
  case "$a" in -K | -K? | --kill-on-bad-exit*) kill="" ;; esac
done

if ! "$bindir/scr_prerun" --prefix "$prefix"; then
  echo "scr_srun_loop.sh: scr_prerun failed; not running the job" >&2
  exit 1
fi

down=""
launch=0
rc=0
while :; do
  # the nodes down now, and those found down before (they stay out of this allocation)
  down=$("$bindir/scr_list_down_nodes" ${down:+--down "$down"})
  launch=$((launch + 1))
  echo "scr_srun_loop.sh: launch $launch${down:+, leaving out down nodes $down}"
  srun $kill ${down:+--exclude="$down"} "$@"
  rc=$?
  if [ "$runs" -ge 0 ] && [ "$launch" -ge "$runs" ]; then
    echo "scr_srun_loop.sh: $launch launch(es), the most SCR_RUNS=$runs allows"
    break
  fi
  down=$("$bindir/scr_list_down_nodes" ${down:+--down "$down"})
  # stop when the job is done or halted, or too few usable nodes remain
  if "$bindir/scr_should_exit" --prefix "$prefix" ${down:+--down "$down"}; then
    break
  fi
  sleep "$pause"
done

"$bindir/scr_postrun" --prefix "$prefix"
exit $rc
