#!/bin/bash
# scr_srun.sh: run an application once under SCR with srun (SCR user guide 2.8.4).
#   scr_srun.sh [srun_options] <prog> [prog_args ...]
# Prepares the allocation (scr_prerun), launches the run with srun, then copies any dataset
# left only in the node-local caches to the prefix (scr_postrun), so the next job restarts
# from it. The prefix is SCR_PREFIX, else the current directory. Start the batch job with
# `#SBATCH --no-kill`, so a failed node does not end the allocation (user guide 2.8.3), and
# set SCR_HALT_SECONDS so the allocation does not end before datasets are flushed. srun gets
# --kill-on-bad-exit=1 unless the options (-K..., --kill-on-bad-exit...) or
# SLURM_KILL_BAD_EXIT say otherwise: with Slurm's default, when one task dies the others of an
# MPI application wait for it until the allocation ends, and scr_postrun never runs.
# A template: copy and adapt it, or use it in place of srun in a batch script.
bindir="@BINDIR@"

# SCR disabled for this job: a plain srun
if [ "${SCR_ENABLE:-1}" = "0" ]; then
  exec srun "$@"
fi
prefix="${SCR_PREFIX:-$PWD}"
kill="--kill-on-bad-exit=1"
[ -z "${SLURM_KILL_BAD_EXIT:-}" ] || kill=""
for a in "$@"; do
  case "$a" in -K | -K? | --kill-on-bad-exit*) kill="" ;; esac
done

if ! "$bindir/scr_prerun" --prefix "$prefix"; then
  echo "scr_srun.sh: scr_prerun failed; not running the job" >&2
  exit 1
fi

srun $kill "$@"
rc=$?

# copy cached datasets to the prefix (scavenge), whatever the run's outcome
"$bindir/scr_postrun" --prefix "$prefix"
exit $rc
