//! `scr_scavenge`: copy what the nodes' caches hold to the prefix and build it. The work is
//! done by [`scr::ops::scavenge`].

pub const HELP: &str = "\
NAME
    scr_scavenge, scr_postrun - save the datasets left in node caches before the allocation ends

SYNOPSIS
    scr_scavenge [--prefix DIR] [--nodes LIST] [--node-cmd CMD | -j LAUNCHER] [--id ID ...] [--no-build] [-v]

DESCRIPTION
    After the job's last run ended (completed, halted, killed or failed) the newest checkpoint
    and unflushed output may exist only in node-local caches, which disappear with the
    allocation. scr_scavenge runs scr_copy on every node at once to copy them to the prefix,
    then builds each dataset that arrived (scr_index --build): files of a node that is gone
    are rebuilt from the redundancy data (XOR, RS, PARTNER) the other nodes copied, the
    summary is written and the dataset is added to the index, so the next job restarts from
    it. A flush that was in flight when the run died is finished this way.
    scr_run calls it after its last run; scr_postrun is the same command, for job scripts
    written for SCR's scr_postrun.

OPTIONS
    -p, --prefix DIR
        The prefix directory (default: SCR_PREFIX, else the current directory).
    -n, --nodes LIST
        The nodes to copy from, in host-list syntax (n[0-3],n7). Default: the allocation's
        nodes (Slurm: SLURM_JOB_NODELIST; LSF: LSB_DJOB_HOSTFILE, LSB_MCPU_HOSTS or LSB_HOSTS,
        without the launch node's first slot; PBS: PBS_NODEFILE; Flux: flux resource list; the
        simulated cluster's SIM_NODES; else this host) without those SCR_EXCLUDE_NODES names
        and those Slurm reports down, drained, failing, not responding or no longer in the job,
        or Flux reports down. A node that is gone should be left out; one that is listed but
        unreachable is reported and the rest go on.
    --node-cmd CMD
        How to run a command on a node: a shell prefix in which {node} is replaced by the node
        name, e.g. 'ssh {node}'. On the simulated cluster:
        'env PMI_RANK=0 SIM_NODE_MAP={node} scripts/sim-node.sh'.
    -j, --joblauncher LAUNCHER
        The launcher the job runs with, as SCR's scr_postrun takes it (scr_postrun -j srun):
        the node command is then srun -N1 -n1 -w {node} (srun), flux run -N1 -n1
        --requires=host:{node} (flux), blaunch {node} (jsrun, lrun), mpirun -np 1 --host
        {node} (mpirun, mpiexec), aprun -n 1 -L {node} (aprun). Without --node-cmd and -j, the
        resource manager's: srun in Slurm, flux run in Flux, blaunch in LSF, pbsdsh -h {node}
        in PBS; without one only this host can be scavenged.
    --id ID
        Scavenge dataset ID instead of the ones owed (repeatable).
    --no-build
        Only copy; build later with scr_index --build ID.
    -v, --verbose
        Say which nodes are scavenged and how they are reached.
    -h, --help
        Print this text.

EXIT STATUS
    0 when every dataset that was owed is complete in the prefix (or nothing was owed);
    1 when a node could not be reached or a dataset remains incomplete (scr_index lists it as
    not valid and names what is missing); 2 for bad usage.

EXAMPLES
    scr_scavenge                                   in a batch script, after the last run
    scr_scavenge --nodes 'node[1-63]' --node-cmd 'ssh {node}'
    scr_postrun -p $SCR_PREFIX -j srun             as SCR's job scripts call it

SEE ALSO
    scr_copy(1), scr_index(1), scr_run(1), SCR user guide sections 2.3.8 and 2.8
";

fn main() {
    std::process::exit(scr::ops::main("scr_scavenge", HELP, false, |argv| scr::ops::scavenge::cli(&argv)));
}
