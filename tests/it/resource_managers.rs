//! LSF, Flux and PBS as SCR sees them, against their commands' documented output: each is
//! detected from its environment (job id, node list), its end time is asked of a fake client
//! command on `PATH` (a shell script printing what the manual says the real one prints), and
//! `SCR_HALT_SECONDS` then stops a real 4-rank `mpirun` job; `scr_run` leaves nodes out of
//! `jsrun` (`--exclude_hosts`) and `flux run` (`--requires=-host:`) and scavenges through the
//! resource manager's way to reach a node (`blaunch`, `flux run --requires=host:`);
//! `scr_postrun -j LAUNCHER` as SCR's job scripts call it. Slurm is tested against a real
//! server in `tests/it/slurm.rs`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common::{Job, Run};

/// A shell script `name` in the job's fake-command directory, first on the job's `PATH`.
fn fake(job: &mut Job, name: &str, body: &str) -> PathBuf {
    let dir = job.root.join("fakebin");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n# fake {name} for tests/it/resource_managers.rs\n{body}")).unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    job.set("PATH", &format!("{}:{}", dir.display(), std::env::var("PATH").unwrap()));
    path
}

/// What a fake command recorded of its calls (one line each: its arguments).
fn calls(job: &Job, name: &str) -> String {
    std::fs::read_to_string(job.root.join(format!("{name}.calls"))).unwrap_or_default()
}

/// A line that records the call, for a fake's body.
fn record(job: &Job, name: &str) -> String {
    format!("echo \"$*\" >> {}\n", job.root.join(format!("{name}.calls")).display())
}

fn cmd(job: &Job, exe: &str, args: &[&str]) -> Run {
    let out = job.command(exe).args(args).stdin(Stdio::null()).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn host() -> String {
    scr::identity::host_name()
}

/// Files under `dir` whose path contains `needle`.
fn files(dir: &Path, needle: &str) -> usize {
    let mut n = 0;
    common::walk(dir, &mut |p| n += p.display().to_string().contains(needle) as usize);
    n
}

/// The three resource managers, each set up in `job` with `left` seconds left in its
/// allocation as its end-time command reports it, and the id it gives the job.
fn resource_manager(job: &mut Job, which: &str, left: i64) -> &'static str {
    let h = host();
    match which {
        "LSF" => {
            job.set("LSB_JOBID", "4242").set("LSB_MCPU_HOSTS", &format!("batch1 1 {h} 4"));
            // bjobs -o time_left: "hours:minutes" then E, L or X (IBM's bjobs -o reference).
            let tl = format!("{}:{:02} L", left / 3600, left % 3600 / 60);
            let r = record(job, "bjobs");
            fake(job, "bjobs", &format!("{r}echo '{tl}'\n"));
            "4242"
        }
        "Flux" => {
            // Open MPI's Flux components (pmix, schizo) would take this mpirun for a Flux job's
            // and ask the (fake) broker: keep them out, as a real Flux site's launcher would
            // not be mpirun.
            job.set("FLUX_JOB_ID", "f2kPq7").set("OMPI_MCA_pmix", "^flux").set("OMPI_MCA_schizo", "^flux");
            // flux job timeleft: whole seconds (flux-job(1), TIMELEFT); flux resource list
            // -no {nodelist}: the node names as a host list (flux-resource(1)).
            let r = record(job, "flux");
            fake(
                job,
                "flux",
                &format!(
                    "{r}case \"$1 $2\" in\n\
                     'job timeleft') echo {left} ;;\n\
                     'resource list') case \"$*\" in *down*) echo '' ;; *) echo '{h}' ;; esac ;;\n\
                     *) echo \"fake flux: $*\" >&2; exit 1 ;;\n\
                     esac\n"
                ),
            );
            "f2kPq7"
        }
        "PBS" => {
            let nodefile = job.root.join("pbs_nodefile");
            std::fs::write(&nodefile, format!("{h}\n{h}\n{h}\n{h}\n")).unwrap();
            job.set("PBS_JOBID", "1234.pbs01").set("PBS_NODEFILE", &nodefile.display().to_string());
            // qstat -f: "name = value" attributes (PBS Professional Reference Guide, qstat);
            // the job has run 10 minutes of its walltime.
            let limit = left + 600;
            let r = record(job, "qstat");
            fake(
                job,
                "qstat",
                &format!(
                    "{r}cat <<EOF\nJob Id: 1234.pbs01\n    Job_Name = job.sh\n    resources_used.walltime = 00:10:00\n    \
                     job_state = R\n    Resource_List.walltime = {:02}:{:02}:{:02}\nEOF\n",
                    limit / 3600,
                    limit % 3600 / 60,
                    limit % 60
                ),
            );
            "1234.pbs01"
        }
        _ => unreachable!(),
    }
}

#[test]
fn halt_seconds_use_the_end_time_lsf_flux_and_pbs_report() {
    for which in ["LSF", "Flux", "PBS"] {
        for (left, stops) in [(240, true), (7200, false)] {
            let mut job = Job::new();
            job.set("SCR_HALT_SECONDS", "600").set("SCR_FLUSH", "0");
            let id = resource_manager(&mut job, which, left);
            let r = job.run("test_api", &["--size", "10000", "--steps", "3"]);
            let what = format!("{which}, {left} s left");
            assert!(r.has("CHECKPOINT ckpt.1 ok=1"), "{what}\n{}", r.dump());
            if stops {
                assert!(r.has("SHOULD_EXIT at ckpt.1") && !r.stdout.contains("ckpt.2"), "{what}\n{}", r.dump());
            } else {
                assert!(r.has("DONE steps=1..3"), "{what}\n{}", r.dump());
            }
            assert!(!r.stderr.contains("end time is unknown"), "{what}\n{}", r.dump());
            // The job id names the job's cache.
            assert!(files(&job.cache, &format!("scr.{id}")) > 0, "{what}: no cache named after job {id}");
            let asked = match which {
                "LSF" => calls(&job, "bjobs"),
                "Flux" => calls(&job, "flux"),
                _ => calls(&job, "qstat"),
            };
            let expected = match which {
                "LSF" => "-noheader -o time_left 4242",
                "Flux" => "job timeleft",
                _ => "-f 1234.pbs01",
            };
            assert!(asked.lines().any(|l| l == expected), "{what}: {asked}");
        }
    }
}

/// A fake launcher that records its arguments and runs the program with 4 ranks under real
/// `mpirun`, dropping its own options (those starting with `-` before the program).
fn launcher_body(job: &Job, name: &str, skip_word: bool) -> String {
    let r = record(job, name);
    let shift = if skip_word { "shift\n" } else { "" };
    format!(
        "{r}{shift}while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n\
         exec mpirun -np 4 \"$@\"\n"
    )
}

#[test]
fn scr_run_leaves_nodes_out_of_jsrun_and_flux_run_and_scavenges_through_the_resource_manager() {
    let h = host();
    for which in ["LSF", "Flux"] {
        let mut job = Job::new();
        job.set("SCR_FLUSH", "0").set("SCR_RUNS", "1").set("SCR_EXCLUDE_NODES", "spare7").set("SCR_MIN_NODES", "1");
        resource_manager(&mut job, which, 7200);
        let prog = common::program("test_api").display().to_string();
        let argv: Vec<String> = if which == "LSF" {
            job.set("LSB_MCPU_HOSTS", &format!("batch1 1 {h} 4 spare7 4"));
            let body = launcher_body(&job, "jsrun", false);
            fake(&mut job, "jsrun", &body);
            // blaunch HOST COMMAND...: LSF's remote task start, here on this host.
            let r = record(&job, "blaunch");
            fake(&mut job, "blaunch", &format!("{r}shift\nexec \"$@\"\n"));
            vec!["jsrun".into(), "-n4".into(), prog, "--size".into(), "10000".into(), "--steps".into(), "2".into()]
        } else {
            // flux run: the launch (-n4) and the scavenge's one task on a node (-N1 -n1).
            let r = record(&job, "flux");
            let run = launcher_body(&job, "flux-run", true);
            let single = "case \"$*\" in *-N1*) shift; while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done; exec \"$@\" ;; esac\n";
            fake(
                &mut job,
                "flux",
                &format!(
                    "{r}case \"$1 $2\" in\n\
                     'job timeleft') echo 7200 ;;\n\
                     'resource list') case \"$*\" in *down*) echo '' ;; *) echo '{h},spare7' ;; esac ;;\n\
                     run*) {single}{run} ;;\n\
                     esac\n"
                ),
            );
            vec![
                "flux".into(),
                "run".into(),
                "-n4".into(),
                prog,
                "--size".into(),
                "10000".into(),
                "--steps".into(),
                "2".into(),
            ]
        };
        let out = job.command(env!("CARGO_BIN_EXE_scr_run")).args(&argv).stdin(Stdio::null()).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{which}\n{text}");
        assert!(text.contains("DONE steps=1..2"), "{which}\n{text}");
        if which == "LSF" {
            assert!(
                calls(&job, "jsrun").lines().next().unwrap_or("").starts_with("--exclude_hosts=spare7 -n4 "),
                "{}",
                calls(&job, "jsrun")
            );
            // The scavenge reached this host through blaunch and copied ckpt.2 from cache.
            assert!(
                calls(&job, "blaunch").lines().any(|l| l.starts_with(&format!("{h} "))),
                "{}\n{text}",
                calls(&job, "blaunch")
            );
        } else {
            let c = calls(&job, "flux");
            assert!(c.lines().any(|l| l.starts_with("run --requires=-host:spare7 -n4 ")), "{c}");
            assert!(c.lines().any(|l| l.starts_with(&format!("run -N1 -n1 --requires=host:{h} "))), "{c}\n{text}");
        }
        assert_eq!(job.index()["datasets"]["2"]["complete"], true, "{which}: ckpt.2 scavenged\n{text}");
    }
}

#[test]
fn scr_postrun_takes_the_job_launcher_as_scr_scripts_pass_it() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--size", "10000", "--steps", "2"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    assert!(!job.prefix.join(".scr/index.scr").exists(), "nothing flushed yet");
    let postrun = env!("CARGO_BIN_EXE_scr_postrun");
    let prefix = job.prefix.display().to_string();
    let bad = cmd(&job, postrun, &["-p", &prefix, "-j", "qsub"]);
    assert_eq!(bad.code, Some(2), "{}", bad.dump());
    assert!(bad.stderr.contains("--joblauncher: unknown launcher \"qsub\""), "{}", bad.dump());
    // scr_postrun -p PREFIX -j mpirun --verbose: the node is reached with mpirun --host.
    let real =
        String::from_utf8(std::process::Command::new("sh").args(["-c", "command -v mpirun"]).output().unwrap().stdout)
            .unwrap();
    let body = format!("{}exec {} \"$@\"\n", record(&job, "mpirun"), real.trim());
    fake(&mut job, "mpirun", &body);
    let out = cmd(&job, postrun, &["-p", &prefix, "-j", "mpirun", "--verbose"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stderr.contains("reached with mpirun -np 1 --host {node}"), "{}", out.dump());
    assert!(calls(&job, "mpirun").starts_with(&format!("-np 1 --host {} ", host())), "{}", calls(&job, "mpirun"));
    assert_eq!(job.index()["datasets"]["2"]["complete"], true, "{}", out.dump());
}
