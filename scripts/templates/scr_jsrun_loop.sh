#!/bin/bash
# scr_jsrun_loop.sh: run an application under SCR with jsrun (LSF), relaunching it after a
# failure within the allocation (SCR user guide 2.8.4).
#   scr_jsrun_loop.sh [jsrun_options] <prog> [prog_args ...]
# Between launches scr_list_down_nodes lists the nodes that cannot take the run
# (SCR_EXCLUDE_NODES, and nodes an earlier launch of this script found down) and
# scr_should_exit says whether to stop: the application finished, a halt condition holds
# (scr_halt, SCR_HALT_SECONDS), or too few usable nodes are left (SCR_MIN_NODES, else the
# last run's node count). jsrun has no option to leave hosts out: with
# LSB_DJOB_COMMFAIL_ACTION=KILL_TASKS LSF drops a failed host from the allocation itself;
# set SCR_EXCLUDE_NODES (or adapt the jsrun line, e.g. with a resource set file) to keep
# others out. At most SCR_RUNS launches (default 5; -1: no limit), SCR_LOOP_SLEEP seconds
# apart (default 60). At the end scr_postrun copies any dataset left only in cache to the
# prefix. The prefix is SCR_PREFIX, else the current directory. Submit with
# `#BSUB -env "all, LSB_DJOB_COMMFAIL_ACTION=KILL_TASKS"` (user guide 2.8.3).
# A template: copy and adapt it, or use it in place of jsrun in a batch script.
bindir="@BINDIR@"

if [ "${SCR_ENABLE:-1}" = "0" ]; then
  exec jsrun "$@"
fi
prefix="${SCR_PREFIX:-$PWD}"
runs="${SCR_RUNS:-5}"
pause="${SCR_LOOP_SLEEP:-60}"

if ! "$bindir/scr_prerun" --prefix "$prefix"; then
  echo "scr_jsrun_loop.sh: scr_prerun failed; not running the job" >&2
  exit 1
fi

down=""
launch=0
rc=0
while :; do
  launch=$((launch + 1))
  echo "scr_jsrun_loop.sh: launch $launch${down:+ (down nodes: $down)}"
  jsrun "$@"
  rc=$?
  if [ "$runs" -ge 0 ] && [ "$launch" -ge "$runs" ]; then
    echo "scr_jsrun_loop.sh: $launch launch(es), the most SCR_RUNS=$runs allows"
    break
  fi
  down=$("$bindir/scr_list_down_nodes" ${down:+--down "$down"})
  if "$bindir/scr_should_exit" --prefix "$prefix" ${down:+--down "$down"}; then
    break
  fi
  sleep "$pause"
done

"$bindir/scr_postrun" --prefix "$prefix"
exit $rc
