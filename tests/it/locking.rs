//! The lock protocol the halt file and the index share with `scr_halt`/`scr_index`: several
//! processes doing read-modify-write at once lose no update. Workers are this test binary
//! re-executed with `SCR_LOCK_WORKER` set.

use std::process::Command;

const WORKERS: usize = 6;
const UPDATES: u64 = 40;

#[test]
fn lock_worker() {
    // Does nothing unless started by the test below.
    let Ok(path) = std::env::var("SCR_TEST_LOCK_FILE") else { return };
    for _ in 0..UPDATES {
        scr::persist::update::<u64, _>(std::path::Path::new(&path), "counter", |v| {
            let seen = *v;
            std::thread::yield_now();
            *v = seen + 1;
        })
        .unwrap();
    }
}

#[test]
fn concurrent_processes_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter.scr");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "locking::lock_worker", "--test-threads", "1"])
                .env("SCR_TEST_LOCK_FILE", &file)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let n: Option<u64> = scr::persist::read(&file, "counter").unwrap();
    assert_eq!(n, Some(WORKERS as u64 * UPDATES));
}
