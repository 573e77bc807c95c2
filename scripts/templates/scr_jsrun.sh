#!/bin/bash
# scr_jsrun.sh: run an application once under SCR with jsrun (SCR user guide 2.8.4).
#   scr_jsrun.sh [jsrun_options] <prog> [prog_args ...]
# Prepares the allocation (scr_prerun), launches the run with jsrun, then copies any dataset
# left only in the node-local caches to the prefix (scr_postrun), so the next job restarts
# from it. The prefix is SCR_PREFIX, else the current directory. Start the batch job with
# `#BSUB -env "all, LSB_DJOB_COMMFAIL_ACTION=KILL_TASKS"`, so a failed node does
# not end the allocation (user guide 2.8.3), and
# set SCR_HALT_SECONDS so the allocation does not end before datasets are flushed.
# A template: copy and adapt it, or use it in place of jsrun in a batch script.
bindir="@BINDIR@"

# SCR disabled for this job: a plain jsrun
if [ "${SCR_ENABLE:-1}" = "0" ]; then
  exec jsrun "$@"
fi
prefix="${SCR_PREFIX:-$PWD}"

if ! "$bindir/scr_prerun" --prefix "$prefix"; then
  echo "scr_jsrun.sh: scr_prerun failed; not running the job" >&2
  exit 1
fi

jsrun "$@"
rc=$?

# copy cached datasets to the prefix (scavenge), whatever the run's outcome
"$bindir/scr_postrun" --prefix "$prefix"
exit $rc
