//! `scr_list_down_nodes` and the job-script templates of user guide 2.8.4
//! (`scripts/templates/`), run on the simulated cluster of `scripts/sim-node.sh`.

use crate::common;

use std::process::Stdio;

use crate::common::{Job, Run};

fn down_nodes(job: &Job, args: &[&str]) -> Run {
    let out = job.command(env!("CARGO_BIN_EXE_scr_list_down_nodes")).args(args).stdin(Stdio::null()).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn scr_list_down_nodes_prints_the_down_nodes_their_reasons_or_the_free_ones() {
    let mut job = Job::cluster(&["n1", "n2", "n3", "n4"]);
    job.set("SIM_NODES", "n[1-5]");
    // nothing down: nothing printed, exit 0
    let r = down_nodes(&job, &[]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(0), ""), "{}", r.dump());
    // SCR_EXCLUDE_NODES (environment or the user config file) and --down
    job.set("SCR_EXCLUDE_NODES", "n2,n9");
    let r = down_nodes(&job, &[]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), "n2\n"), "{}", r.dump());
    job.unset("SCR_EXCLUDE_NODES");
    std::fs::write(job.prefix.join(".scrconf"), "SCR_EXCLUDE_NODES=n2\n").unwrap();
    let r = down_nodes(&job, &["--down", "n[4-5]"]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), "n2,n4,n5\n"), "{}", r.dump());
    let r = down_nodes(&job, &["--reason", "-d", "n4"]);
    assert_eq!(r.stdout, "n2: SCR_EXCLUDE_NODES\nn4: given as down (--down)\n", "{}", r.dump());
    let r = down_nodes(&job, &["--free", "--down=n4"]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), "n1,n3,n5\n"), "{}", r.dump());
    // a node set of its own
    let r = down_nodes(&job, &["n[1,3]"]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(0), ""), "{}", r.dump());
    let r = down_nodes(&job, &["x[1-3]", "--down", "x3"]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), "x3\n"), "{}", r.dump());
    // bad usage names the option
    let r = down_nodes(&job, &["--down", "n["]);
    assert_eq!(r.code, Some(2), "{}", r.dump());
    assert!(r.stderr.contains("--down: \"n[\": '[' without ']'"), "{}", r.dump());
    let r = down_nodes(&job, &["--free", "--reason"]);
    assert_eq!(r.code, Some(2), "{}", r.dump());
    // --log: a NODE_FAIL event per down node in the prefix's event log
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    let r = down_nodes(&job, &["--log", "--secs", "120", "--down", "n4"]);
    assert!(r.stderr.contains("the event log is disabled"), "{}", r.dump());
    job.set("SCR_LOG_ENABLE", "1").set("SCR_LOG_SYSLOG_ENABLE", "0");
    let r = down_nodes(&job, &["--log", "--secs", "120", "--down", "n4"]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(1), "n2,n4\n"), "{}", r.dump());
    let log = std::fs::read_to_string(job.prefix.join(".scr/log")).unwrap();
    let fails: Vec<&str> = log.lines().filter(|l| l.contains("NODE_FAIL")).collect();
    assert_eq!(fails.len(), 2, "{log}");
    assert!(fails[0].contains("node=n2") && fails[0].contains("secs=120"), "{log}");
    assert!(fails[1].contains("node=n4"), "{log}");
    assert_eq!(down_nodes(&job, &["--secs", "5"]).code, Some(2));
}

#[test]
fn srun_loop_template_relaunches_after_a_failure_leaving_out_a_node_found_down() {
    let mut job = Job::cluster(&["n1", "n2", "n3", "n4"]);
    // n5 is the allocation's spare; the run needs 4 nodes
    job.set("SIM_NODES", "n[1-5]").set("SCR_MIN_NODES", "4").set("SCR_LOOP_SLEEP", "0");
    let tools = job.root.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let script = common::template(&tools, "scr_srun_loop.sh");
    // `srun` here: record the command line, then run the job step (what follows srun's options)
    // with mpirun on the simulated nodes; after the first launch the spare node n5 fails (named
    // down from then on)
    let log = job.root.join("srun.log");
    let srun = format!(
        "#!/bin/bash\necho \"$*\" >> {log}\nwhile [ \"${{1#--}}\" != \"$1\" ]; do shift; done\n\
         mpirun -np 4 {sim} \"$@\"\nrc=$?\necho SCR_EXCLUDE_NODES=n5 > \"$SCR_PREFIX/.scrconf\"\nexit $rc\n",
        log = log.display(),
        sim = common::repo().join("scripts/sim-node.sh").display()
    );
    std::fs::write(tools.join("srun"), srun).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(tools.join("srun")).status().unwrap();
    let test_api = common::program("test_api");
    let mut cmd = job.command(&script);
    cmd.env("PATH", format!("{}:{}", tools.display(), std::env::var("PATH").unwrap()));
    cmd.args([test_api.to_str().unwrap(), "--steps", "6", "--crash-after", "3"]);
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let r = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // the first run crashed after checkpoint 3; the second restarted from it and finished
    assert!(r.has("CRASH after ckpt.3"), "{}", r.dump());
    assert!(r.has("RESTARTED ckpt.3 step=3"), "{}", r.dump());
    assert!(r.has("DONE steps=4..9"), "{}", r.dump());
    // two launches: the second left out the node found down; then scr_should_exit stopped
    let launches = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = launches.lines().collect();
    assert_eq!(lines.len(), 2, "{launches}\n{}", r.dump());
    // srun ends the step when a task fails, so the relaunch is not held up by ranks waiting
    // for the dead one
    assert!(lines[0].starts_with("--kill-on-bad-exit=1 ") && !lines[0].contains("--exclude"), "{launches}");
    assert!(lines[1].starts_with("--kill-on-bad-exit=1 --exclude=n5 "), "{launches}");
    assert!(r.stdout.contains("scr_srun_loop.sh: launch 2, leaving out down nodes n5"), "{}", r.dump());
}
