//! `scr_index`: list and manage the datasets in a prefix directory (user guide 2.10). The work
//! is done by [`scr::ops::index`] and [`scr::transfer::build`].

use scr::ops::args::{self, flag, valued, Opt};
use scr::ops::{index, next, prefix, OpError, OpResult};
use scr::transfer::build;

const HELP: &str = "\
NAME
    scr_index - list and manage the datasets in an SCR prefix directory

SYNOPSIS
    scr_index [--prefix DIR] [--list] [--json]
    scr_index [--prefix DIR] --restart [--json]
    scr_index [--prefix DIR] --current NAME | --drop NAME | --drop-after NAME | --add NAME | --build ID

DESCRIPTION
    SCR records the datasets of a job that are in the prefix directory (the parallel file
    system) in PREFIX/.scr/index.scr. A restart starts from the checkpoint marked current, else
    from the newest valid one, and works backwards; it never uses a dataset that is incomplete
    (a flush or scavenge did not finish) or failed (a restart from it failed).

    Without an action, scr_index lists the index, newest first:

        DSET VALID FLUSHED             CUR NAME
          18 YES   2014-01-14T11:26:06 *   ckpt.18
          12 YES   2014-01-14T10:28:23     ckpt.12

    DSET is the dataset id (the number of its PREFIX/.scr/scr.dataset.<id> directory), VALID
    whether a restart may use it, FLUSHED when it reached the prefix (UTC), CUR a * for the
    current checkpoint. Changes are made under the lock the running library takes, so scr_index
    may be used while the job runs.

OPTIONS
    -p, --prefix DIR
        The prefix directory (default: the current directory). It must contain .scr.
    -l, --list
        List the datasets (the default).
    --json
        List as JSON for scripts: {\"prefix\", \"current\", \"datasets\": [{\"id\", \"name\",
        \"valid\", \"complete\", \"failed\", \"flushing\", \"flushed\", \"current\",
        \"checkpoint\", \"output\", \"ranks\", \"files\", \"bytes\"}]}; with --build, the build
        report {\"id\", \"name\", \"ranks\", \"complete\", \"rebuilt\", \"missing\", \"notes\"}.
    --restart
        Print the checkpoint the next run would restart from, as SCR_Init decides: the newest
        checkpoint complete in this node's cache (every file of its ranks here present with
        its size) or in the index above (the current one first; never failed or incomplete
        ones; not with SCR_FETCH=0), the cached copy on a tie, as lines:
            checkpoint: NAME            (or: checkpoint: none)
            dataset: ID
            from: cache | prefix
            nodes: HOST (ranks 0-3 of 4)  (cache only: other nodes' caches are not visible;
                                           fallback: names the prefix checkpoint used then)
            files: N (B bytes)
            location: DIR               (where the bytes are)
            paths: DIRS                 (the application's directories of them)
        It reads the cache through SCR_CNTL_BASE and the job id as the library does: run it
        in the job's environment. With --json: {\"prefix\", \"checkpoint\", \"fallback\",
        \"notes\"}. Exit status 0 when there is a checkpoint, 3 when there is none (also for
        a directory without .scr: no job ran there).
    -c, --current NAME
        Restart from checkpoint NAME next (it must be valid). Newer checkpoints are not deleted,
        only skipped by the next restart.
    -d, --drop NAME
        Remove NAME's entry from the index. Its files are not deleted. (-r/--remove is the old
        spelling.)
    --drop-after NAME
        Remove the entries of every dataset newer than NAME from the index, so the next
        restart starts from NAME or an older checkpoint (a current mark on a removed entry is
        cleared). Their files are not deleted; --add brings an entry back.
    -a, --add NAME
        Add the entry of dataset NAME back, from the summary.scr and rank2file.scr in its
        scr.dataset.<id> directory, after checking that all its files are in place.
    -b, --build ID
        Index dataset ID from what a scavenge copied into PREFIX/.scr/scr.dataset.ID: read each
        rank's <rank>.scrfilemap, find missing files, rebuild them when the redundancy data
        allows (XOR, RS, PARTNER; the rebuilt data is checked against the CRC32s recorded when
        it was written), write the summary and add the entry, complete or incomplete. The
        current mark is left where it is (a restart starts from the current checkpoint or
        older ones): use --current to restart from the built dataset.
    -h, --help
        Print this text.

EXIT STATUS
    0 on success; 3 for --restart when no checkpoint would be loaded; 1 on failure: a directory without .scr, a damaged index (reported by name
    and left as it is), an unknown dataset, or a --build that leaves the dataset incomplete;
    2 for bad usage. A failed change changes no file.

EXAMPLES
    scr_index
    scr_index --prefix /p/lscratch/user1/sim123 --json
    if scr_index --restart --prefix $SCR_PREFIX; then echo restarting; fi
    scr_index --current ckpt.12
    scr_index --drop ckpt.50 && scr_index --add ckpt.50
    scr_index --drop-after ckpt.12
    scr_index --build 50

FILES
    PREFIX/.scr/index.scr, PREFIX/.scr/scr.dataset.<id>/{summary.scr,rank2file.scr,*.scrfilemap}

SEE ALSO
    scr_scavenge(1), scr_run(1), SCR user guide section 2.10
";

const OPTS: &[Opt] = &[
    valued("prefix", Some('p'), "DIR"),
    flag("list", Some('l')),
    flag("json", None),
    flag("restart", None),
    valued("current", Some('c'), "NAME"),
    valued("drop", Some('d'), "NAME"),
    valued("drop-after", None, "NAME"),
    valued("remove", Some('r'), "NAME"),
    valued("add", Some('a'), "NAME"),
    valued("build", Some('b'), "ID"),
];

fn body(argv: Vec<String>) -> OpResult<i32> {
    let p = args::parse(OPTS, &argv, false)?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?} (the prefix is given with --prefix DIR)")));
    }
    let actions =
        ["current", "drop", "drop-after", "remove", "add", "build", "restart"].iter().filter(|a| p.has(a)).count();
    if actions > 1 {
        return Err(OpError::usage("give one of --current, --drop, --drop-after, --add, --build, --restart at a time"));
    }
    if p.has("restart") {
        let n = next::next(&prefix::choose(p.value("prefix")))?;
        if p.has("json") {
            println!("{}", serde_json::to_string_pretty(&n).expect("serialises"));
        } else {
            print!("{}", next::describe(&n));
        }
        return Ok(if n.checkpoint.is_some() { 0 } else { 3 });
    }
    let build_id = p.value("build").map(|v| args::parse_count("build", v)).transpose()?;
    let layout = prefix::open(&prefix::choose(p.value("prefix")), false)?;
    let json = p.has("json");
    if let Some(name) = p.value("current") {
        let id = index::set_current(&layout, name)?;
        println!("current checkpoint: {name} (dataset {id})");
    } else if let Some(name) = p.value("drop").or(p.value("remove")) {
        let id = index::drop(&layout, name)?;
        println!("dropped {name} (dataset {id}) from the index; its files are still in the prefix");
    } else if let Some(name) = p.value("drop-after") {
        let (dropped, current) = index::drop_after(&layout, name)?;
        if dropped.is_empty() {
            println!("no dataset in the index is newer than {name}; nothing dropped");
        }
        for (id, n) in &dropped {
            println!("dropped {n} (dataset {id}) from the index; its files are still in the prefix");
        }
        if current {
            println!(
                "the current mark was on a dropped entry and is cleared: the next restart starts from {name} or older"
            );
        }
    } else if let Some(name) = p.value("add") {
        let id = index::add(&layout, name)?;
        println!("added {name} (dataset {id}) to the index");
    } else if let Some(id) = build_id {
        let report = build::build(&layout, id, 1 << 20, build::Current::Keep)?;
        if json {
            println!("{}", serde_json::to_string_pretty(&report).expect("serialises"));
        } else {
            println!("{}", report.describe());
            // a newer checkpoint than the current one is skipped by the next restart: say so
            let listing = index::list(&layout)?;
            let current = listing.datasets.iter().find(|r| r.current);
            let built = listing.datasets.iter().find(|r| r.id == id && r.valid && r.checkpoint);
            if let (Some(c), Some(b)) = (current, built) {
                if c.id < b.id {
                    println!(
                        "the current mark stays on {} (dataset {}): the next restart skips {}; run scr_index \
                         --current {} to restart from it",
                        c.name, c.id, b.name, b.name
                    );
                }
            }
        }
        return Ok(if report.complete { 0 } else { 1 });
    } else {
        let listing = index::list(&layout)?;
        if json {
            println!("{}", serde_json::to_string_pretty(&listing).expect("serialises"));
        } else {
            print!("{}", index::table(&listing));
        }
    }
    Ok(0)
}

fn main() {
    std::process::exit(scr::ops::main("scr_index", HELP, false, body));
}
