//! `scr_run`: launch an SCR job, relaunch it after failures, scavenge at the end (user guide
//! 2.8). The work is done by [`scr::ops::run`].

pub const HELP: &str = "\
NAME
    scr_run - run an SCR job in an allocation: launch, relaunch after failures, scavenge

SYNOPSIS
    scr_run [OPTIONS] LAUNCHER [launcher options] PROG [PROG args]
    scr_srun [srun options] PROG [args]        (scr_run srun ...)
    scr_mpirun [mpirun options] PROG [args]    (scr_run mpirun ...)

DESCRIPTION
    Replaces the launch line of a batch script, e.g.  scr_run srun -n512 -N64 ./my_job
    (allocate with --no-kill so a failed node does not end the allocation). scr_run

    1.  checks the job (as scr_prerun): configuration, halt file and index readable, no other
        scr_run active on the prefix, no halt condition already holding (SCR_Finalize's exit
        reason from an earlier run does not count: the next SCR_Init clears it);
    2.  launches the run with LAUNCHER, leaving out the nodes SCR_EXCLUDE_NODES names and, in a
        Slurm allocation, the nodes Slurm reports down, drained, failing or not responding, or
        no longer in the job (in Flux, those it reports down) (srun: --exclude; Open MPI
        mpirun: --host with the other nodes; jsrun: --exclude_hosts; flux run or flux submit:
        --requires=-host:NODES; the simulated cluster of scripts/sim-node.sh: the ranks of an excluded node move to a spare
        of SIM_NODES), and records it in PREFIX/.scr/run.scr (for scr_halt --immediate). srun
        also gets --kill-on-bad-exit=1 (unless the command line or SLURM_KILL_BAD_EXIT sets
        it): without it the other tasks of an MPI run wait for a dead one until the
        allocation ends;
    3.  after the run, stops when it exited 0, when the halt file holds a satisfied condition
        (an exit reason from scr_halt, no checkpoints left, --before/--after times, fewer
        than SCR_HALT_SECONDS left before the allocation ends), when SCR_RUNS runs were made,
        or when fewer usable nodes remain than SCR_MIN_NODES (default: srun's -N, else as many
        nodes as the previous run used); otherwise waits --delay seconds and launches again: the library
        restarts from the cache, rebuilding what a lost node held, or from the prefix;
    4.  scavenges the nodes of the last run (scr_scavenge): the newest checkpoint and
        unflushed output are copied to the prefix and rebuilt there if a node is gone.

    SCR_RUNS, SCR_MIN_NODES and SCR_EXCLUDE_NODES are read from the environment or the
    configuration files before every run, so a node can be excluded by adding
    SCR_EXCLUDE_NODES to PREFIX/.scrconf while the job runs.

OPTIONS (before LAUNCHER)
    -p, --prefix DIR
        The prefix directory (default: SCR_PREFIX, else the current directory).
    -r, --runs N
        Make at most N runs (overrides SCR_RUNS; -1: no limit). Default SCR_RUNS=1: no relaunch.
    --min-nodes N
        Nodes a run needs (overrides SCR_MIN_NODES).
    --delay SECONDS
        Wait between a failed run and the next, for nodes to clean up (default 10).
    --preload
        Transparent mode: run the application with LD_PRELOAD=libscr_preload.so (the one
        beside scr_run, or in ../lib), so an unmodified MPI program checkpoints through SCR.
        Passed with -x to mpirun and --export to srun.
    --preload-lib PATH
        As --preload, with this library.
    --no-scavenge
        Do not scavenge after the last run.
    --node-cmd CMD
        How to run scr_copy on a node for the scavenge (see scr_scavenge --help).
    -h, --help
        Print this text (after LAUNCHER, --help belongs to the launcher or the program).

ENVIRONMENT
    SCR_PREFIX, SCR_RUNS, SCR_MIN_NODES, SCR_EXCLUDE_NODES, SCR_HALT_SECONDS, SCR_END_TIME
    (else SLURM_JOB_END_TIME, else the end time the resource manager reports: squeue, bjobs,
    flux job timeleft, qstat -f), SLURM_JOB_NODELIST, LSB_DJOB_HOSTFILE/LSB_MCPU_HOSTS/
    LSB_HOSTS, PBS_NODEFILE or flux resource list (the allocation), SIM_NODE_ROOT, SIM_NODE_MAP,
    SIM_NODES (the simulated cluster).

EXIT STATUS
    0 when the job stopped cleanly (completed, or halted by a condition) and whatever was
    scavenged is complete in the prefix; 1 when it stopped for any other reason (SCR_RUNS runs
    failed, too few nodes, an incomplete scavenge, a failed check); 2 for bad usage.

EXAMPLES
    export SCR_HALT_SECONDS=3600 SCR_RUNS=3
    scr_run srun -n512 -N64 ./my_job
    scr_run --preload mpirun -np 4 ./unmodified_app
    SCR_RUNS=-1 scr_srun -n512 -N64 ./my_job

FILES
    PREFIX/.scr/run.scr, PREFIX/.scr/halt.scr, PREFIX/.scr/index.scr, PREFIX/.scrconf

SEE ALSO
    scr_halt(1), scr_scavenge(1), scr_index(1), scr_prerun(1), SCR user guide section 2.8
";

fn main() {
    std::process::exit(scr::ops::main("scr_run", HELP, true, |argv| scr::ops::run::cli(&argv, None)));
}
