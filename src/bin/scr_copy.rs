//! `scr_copy`: copy this node's cached datasets to the prefix (the per-node part of a
//! scavenge). The work is done by [`scr::ops::scavenge::copy_cli`] (the transfer layer's `copy_node`).

const HELP: &str = "\
NAME
    scr_copy - copy the datasets cached on this node to the prefix directory

SYNOPSIS
    scr_copy [--prefix DIR] [--id ID ...]

DESCRIPTION
    Runs on one compute node after the job's last run, usually started on every node by
    scr_scavenge or scr_run. It reads the node's control directory (SCR_CNTL_BASE, the user
    and the job id, as the library derives them) and copies, for every rank that ran on the
    node, the datasets the prefix still lacks: the newest checkpoint and every output dataset
    not yet flushed (one whose flush was cut short counts as not flushed; one the index lists
    as complete is skipped). Application files go to their place below the prefix, redundancy
    files to PREFIX/.scr/scr.dataset.<id>/, each checked (size, and CRC32 when recorded) and
    published under a temporary name; then the rank's <rank>.scrfilemap is written there.
    scr_index --build turns what all nodes copied into an indexed dataset.

    For scr_scavenge it prints one line per rank part on standard output:
        SCR_COPY copied id=ID rank=R files=N bytes=B
        SCR_COPY failed id=ID rank=R why=TEXT
    Remarks go to standard error.

OPTIONS
    -p, --prefix DIR
        The prefix directory (default: SCR_PREFIX, else the current directory).
    --id ID
        Copy dataset ID instead of the ones owed (repeatable).
    -h, --help
        Print this text.

EXIT STATUS
    0 when every part was copied (or nothing was owed), 1 when a part could not be copied
    (the build may still rebuild it from redundancy data), 2 for bad usage.

SEE ALSO
    scr_scavenge(1), scr_index(1)
";

fn main() {
    std::process::exit(scr::ops::main("scr_copy", HELP, false, |argv| scr::ops::scavenge::copy_cli(&argv)));
}
