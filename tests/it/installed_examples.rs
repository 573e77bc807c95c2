//! The Quick Start of the user guide (2.1.2, 2.1.3) on an installation made by
//! `scripts/install.sh`: `make test_api` in `<install>/share/scr/examples`, then the program
//! under real `mpirun` with 4 ranks: checkpoints complete, and the next run restarts.

use crate::common;
use crate::common::Job;

use std::process::Command;

#[test]
fn quick_start_builds_test_api_from_the_installed_examples_and_restarts() {
    let dir = tempfile::Builder::new().prefix("scr-install-").tempdir().unwrap();
    let inst = dir.path().join("inst");
    let mut cmd = Command::new("bash");
    cmd.arg(common::repo().join("scripts/install.sh"));
    if !common::target_dir().ends_with("release") {
        cmd.arg("--debug");
    }
    let out = cmd.arg(&inst).output().expect("bash runs");
    assert!(out.status.success(), "install.sh: {}", String::from_utf8_lossy(&out.stderr));
    let examples = inst.join("share/scr/examples");
    for f in ["test_api.c", "makefile", "CMakeLists.txt", "README.md", "scr_srun.sh", "scr_srun_loop.sh"] {
        assert!(examples.join(f).is_file(), "{f} not installed in {}", examples.display());
    }
    // the guide's command, with no PKG_CONFIG_PATH set: the makefile finds the installation
    let out =
        Command::new("make").arg("test_api").current_dir(&examples).env_remove("PKG_CONFIG_PATH").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "make test_api:\n{text}");
    assert!(text.contains(&format!("-L{}/lib", inst.display())), "{text}");
    let exe = examples.join("test_api").display().to_string();

    let job = Job::new();
    let r = job.run_exe(4, std::slice::from_ref(&exe), &["--steps".into(), "3".into()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    for k in 1..=3 {
        assert!(r.has(&format!("CHECKPOINT ckpt.{k} ok=1")), "{}", r.dump());
    }
    assert_eq!(job.cached_files("ckpt.3/rank_").len(), 4, "{}", r.dump());
    // the next run restarts from the newest checkpoint, every byte checked by the program
    let r = job.run_exe(4, std::slice::from_ref(&exe), &["--steps".into(), "2".into()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED ckpt.3 step=3"), "{}", r.dump());
    assert!(r.has("DONE steps=4..5"), "{}", r.dump());
    // the binary links the installed library (cargo's LD_LIBRARY_PATH, which names the build
    // directory, left out)
    let ldd = Command::new("ldd").arg(&exe).env_remove("LD_LIBRARY_PATH").output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.contains(&format!("{}/lib/libscr.so", inst.display())), "{ldd}");
}
