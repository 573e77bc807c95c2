//! The bindings and the installed package, as an SCR user meets them, under real `mpirun`
//! with 4 ranks. An installation is made once per test process by `scripts/install.sh` (from
//! the build under test), and everything is built against it the way the user guide says:
//! Fortran programs written against `scrf.h` (fixed-form `.F`, free-form `.F90`, and the
//! `.F90` again with `use scr`) compiled with `mpif90 ... -lscrf`; the Python module under
//! Debian's mpi4py; a CMake project using `find_package(scr 3)` with the shared and the static
//! targets; pkg-config and plain static compiler lines, and a mixed C/Fortran program whose C
//! half must see the Fortran half's `SCR_INIT` (one runtime). Each program checkpoints (one
//! checkpoint also marked output), is killed, restarts from cache verifying every value it
//! reads, and sets and queries a parameter; the tests check the bytes in the prefix and the
//! cache.

use crate::common;
use crate::common::{Job, Run};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The installation this process tests, made once by scripts/install.sh.
fn install() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = common::target_dir().join(format!("install-{}", std::process::id()));
        let mut cmd = Command::new("bash");
        cmd.arg(common::repo().join("scripts/install.sh"));
        if !common::target_dir().ends_with("release") {
            cmd.arg("--debug");
        }
        let out = cmd.arg(&dir).output().expect("bash runs");
        assert!(
            out.status.success(),
            "scripts/install.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// Run program `exe` with `args` on 4 ranks in `job`.
fn run(job: &Job, exe: &str, args: &[&str]) -> Run {
    job.run_exe(4, std::slice::from_ref(&exe.to_string()), &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// Run a build command; panic with its output if it fails.
fn build(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e} (scripts/setup.sh installs the tools)"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// Compile `examples/fortran/<file>` with `mpif90` and the user guide's flags.
fn fortran(file: &str, extra: &[&str]) -> String {
    let inst = install();
    let out = inst.join(format!("{}{}", file.replace('.', "_"), extra.join("").replace('-', "_")));
    build(
        Command::new("mpif90")
            .arg("-Wall")
            .args(extra)
            .arg(format!("-I{}/include", inst.display()))
            .arg(common::repo().join("examples/fortran").join(file))
            .arg(format!("-L{}/lib", inst.display()))
            .arg("-lscrf")
            .arg(format!("-Wl,-rpath,{}/lib", inst.display()))
            .arg("-o")
            .arg(&out),
        &format!("mpif90 {file}"),
    );
    out.display().to_string()
}

/// The value the Fortran programs write at position `i` (from 1) of rank `rank`'s file.
fn fortran_value(rank: i32, step: i32, i: i32) -> i32 {
    rank * 1_000_000 + step * 10_000 + i
}

/// The checks every program passes: run 1 writes checkpoints 1-3 (2 also output) and is
/// killed after 3; only the output reaches the prefix (SCR_FLUSH=0); run 2 restarts from the
/// cached checkpoint 3 and goes on. `program(args)` runs the program with its own arguments for
/// (steps, crash-after, output-step); `check_file` checks a rank's file of checkpoint 2 in
/// the prefix.
fn checkpoint_crash_restart(job: &Job, run: impl Fn(&[&str]) -> Run, check_file: impl Fn(&[u8], i32)) {
    let r = run(&["3", "3", "2"]);
    assert!(r.stdout.contains("NO_RESTART"), "{}", r.dump());
    for line in ["CHECKPOINT ckpt.1 ok=1", "CHECKPOINT ckpt.2 ok=1", "CHECKPOINT ckpt.3 ok=1", "CRASH after ckpt.3"] {
        assert!(r.has(line), "missing {line}\n{}", r.dump());
    }
    assert_ne!(r.code, Some(0), "the run was killed: {}", r.dump());
    for rank in 0..4 {
        let f = job.prefix.join(format!("ckpt.2/rank_{rank}.dat"));
        check_file(&std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}\n{}", f.display(), r.dump())), rank);
    }
    assert!(!job.prefix.join("ckpt.1").exists() && !job.prefix.join("ckpt.3").exists(), "SCR_FLUSH=0");
    assert_eq!(job.cached_files("ckpt.3/rank_").len(), 4, "{:?}", job.cached_files(""));
    let r = run(&["2", "0", "0"]);
    assert!(r.has("RESTARTED ckpt.3 step=3") && r.has("DONE steps=4..5"), "{}", r.dump());
    assert!(r.has("CHECKPOINT ckpt.5 ok=1") && r.code == Some(0), "{}", r.dump());
}

fn fortran_job() -> Job {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    job
}

/// The Fortran programs' own checks: SCR_CONFIG set (with a constant VAL) and query with
/// blanks around '=', a query of a parameter that is not set (all blanks), a bad value.
fn fortran_config_lines(r: &Run) {
    for line in ["CONFIG SCR_CACHE_SIZE=[3] ierr=0 padded=T", "CONFIG unset_blank=T ierr=0", "CONFIG bad_value_fails=T"]
    {
        assert!(r.has(line), "missing {line}\n{}", r.dump());
    }
}

fn fortran_file_check(bytes: &[u8], rank: i32) {
    assert_eq!(bytes.len(), 4096 * 4, "rank {rank}");
    for (i, v) in bytes.chunks(4).enumerate() {
        let v = i32::from_ne_bytes(v.try_into().unwrap());
        assert_eq!(v, fortran_value(rank, 2, i as i32 + 1), "rank {rank} value {}", i + 1);
    }
}

#[test]
fn fixed_form_fortran_against_scrf_h() {
    let exe = fortran("test_api.F", &[]);
    let job = fortran_job();
    let program = |a: &[&str]| {
        let r = run(&job, &exe, a);
        fortran_config_lines(&r);
        r
    };
    checkpoint_crash_restart(&job, program, fortran_file_check);
}

#[test]
fn free_form_fortran_against_scrf_h_and_the_scr_module() {
    for extra in [&[][..], &["-DUSE_SCR_MODULE"]] {
        let exe = fortran("test_api.F90", extra);
        let job = fortran_job();
        let program = |a: &[&str]| {
            let r = run(&job, &exe, a);
            fortran_config_lines(&r);
            for line in ["CONFIG short_val_fails=T", "VERSION scr-rs 0.1.0"] {
                assert!(r.has(line), "{extra:?}: missing {line}\n{}", r.dump());
            }
            r
        };
        checkpoint_crash_restart(&job, program, fortran_file_check);
        let first = run(&job, &exe, &["0"]);
        assert!(first.has("RESTARTED ckpt.5 step=5"), "{}", first.dump());
        // The short VAL is reported, naming the call and the fix.
        assert!(first.stderr.contains("SCR_CONFIG: VAL holds 4 characters"), "{}", first.dump());
        let fresh = run(&fortran_job(), &exe, &["0"]);
        assert!(fresh.has("NO_RESTART name_blank=T"), "{extra:?}: {}", fresh.dump());
        // SCR_ROUTE_SHARED_FILE (rank 0's header in the prefix), SCR_RESTART_INFO and _FILE
        let job = fortran_job();
        let r = run(&job, &exe, &["2", "0", "0", "1"]);
        assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{extra:?}: {}", r.dump());
        assert_eq!(std::fs::metadata(job.prefix.join("ckpt.2/header.dat")).map(|m| m.len()).ok(), Some(64));
        let r = run(&job, &exe, &["0", "0", "0", "1"]);
        assert!(r.has("LISTED writers=4 files=5 own=1 header=1"), "{extra:?}: {}", r.dump());
        assert!(r.has("RESTARTED ckpt.2 step=2"), "{extra:?}: {}", r.dump());
    }
}

#[test]
fn python_module_under_mpi4py() {
    let python = install().join("share/scr/python");
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("PYTHONPATH", &python.display().to_string());
    let example = python.join("scr_example.py").display().to_string();
    let program = |a: &[&str]| {
        let args: Vec<String> = ["--size", "100000", "--steps", a[0], "--crash-after", a[1], "--output-step", a[2]]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = job.run_exe(4, &[common::python(), example.clone()], &args);
        assert!(r.has("CONFIG SCR_CACHE_SIZE=2"), "{}", r.dump());
        r
    };
    checkpoint_crash_restart(&job, program, |bytes, rank| {
        let seed = format!("rank {rank} step 2;");
        assert_eq!(bytes.len(), 100000);
        assert!(bytes.chunks(seed.len()).all(|c| seed.as_bytes().starts_with(c)), "rank {rank}");
    });

    // route_shared_file (one file all ranks write), restart_info, restart_file
    let mut sjob = Job::new();
    sjob.set("SCR_FLUSH", "0").set("PYTHONPATH", &python.display().to_string());
    let shared = |steps: &str| {
        let args: Vec<String> =
            ["--size", "1000", "--steps", steps, "--shared"].iter().map(|s| s.to_string()).collect();
        sjob.run_exe(4, &[common::python(), example.clone()], &args)
    };
    let r = shared("2");
    assert!(r.has("NO_RESTART") && r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    assert_eq!(std::fs::metadata(sjob.prefix.join("ckpt.2/all.dat")).map(|m| m.len()).ok(), Some(4 * 4096));
    let r = shared("0");
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.has("SHARED writers=4 files=5"), "{}", r.dump());

    // Without MPI: config() sets, queries and raises on a bad value; importing finds the
    // installed libscr.so by the module's own location (no LIBSCR, no LD_LIBRARY_PATH).
    let out = job
        .command(common::python())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LIBSCR")
        .arg("-c")
        .arg(
            "import scr\n\
             print(scr.config('SCR_CHECKPOINT_INTERVAL = 3'), scr.config('SCR_CHECKPOINT_INTERVAL'), \
             scr.config('SCR_CHECKPOINT_SECONDS'))\n\
             print(scr.config('STORE= /dev/shm GROUP = NODE'), scr.config('STORE=/dev/shm GROUP'))\n\
             scr.config('STORE=')\n\
             print(scr.config('STORE=/dev/shm GROUP'))\n\
             try:\n    scr.config('SCR_FLUSH=often')\nexcept RuntimeError as e:\n    print('raised', e)\n\
             print(scr._lib._name)",
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..4], ["None 3 None", "None NODE", "None", "raised SCR_Config failed"], "{text}");
    assert_eq!(Path::new(lines[4]), install().join("lib/libscr.so"), "{text}");
}

/// examples/c/test_api.c built by CMake: killed after checkpoint 2, it restarts from it.
fn c_checkpoint_crash_restart(exe: &Path) {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let exe = exe.display().to_string();
    let r = run(&job, &exe, &["--size", "100000", "--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1") && r.code != Some(0), "{}", r.dump());
    let r = run(&job, &exe, &["--size", "100000", "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.has("DONE steps=3..3"), "{}", r.dump());
}

/// Whether `exe` needs a shared library whose name starts with `lib`.
fn needs(exe: &Path, lib: &str) -> bool {
    let out = build(Command::new("readelf").arg("-d").arg(exe), "readelf");
    out.lines().any(|l| l.contains("(NEEDED)") && l.contains(&format!("[{lib}")))
}

#[test]
fn cmake_package_shared_and_static_targets() {
    let inst = install();
    let bdir = inst.join("cmake-build");
    let _ = std::fs::remove_dir_all(&bdir);
    let source = common::repo().join("examples/cmake");
    build(
        Command::new("cmake")
            .arg("-S")
            .arg(&source)
            .arg("-B")
            .arg(&bdir)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", inst.display())),
        "cmake configure",
    );
    build(Command::new("cmake").arg("--build").arg(&bdir), "cmake --build");
    for (exe, shared) in [
        ("test_api_shared", Some("libscr.so")),
        ("test_api_static", None),
        ("test_api_f_shared", Some("libscrf.so")),
        ("test_api_f90_static", None),
        ("test_api_f90_module", Some("libscrf.so")),
    ] {
        let path = bdir.join(exe);
        match shared {
            Some(lib) => assert!(needs(&path, lib), "{exe} should need {lib}"),
            None => assert!(!needs(&path, "libscr"), "{exe} should hold SCR itself"),
        }
    }
    c_checkpoint_crash_restart(&bdir.join("test_api_shared"));
    c_checkpoint_crash_restart(&bdir.join("test_api_static"));
    for exe in ["test_api_f_shared", "test_api_f90_static"] {
        let exe = bdir.join(exe).display().to_string();
        let job = fortran_job();
        checkpoint_crash_restart(&job, |a| run(&job, &exe, a), fortran_file_check);
    }

    // The package reports the SCR API version: a build that needs SCR 4 (or 2) is refused.
    for wanted in ["4", "2"] {
        let out = Command::new("cmake")
            .arg("-S")
            .arg(&source)
            .arg("-B")
            .arg(inst.join(format!("cmake-build-{wanted}")))
            .arg(format!("-DCMAKE_PREFIX_PATH={}", inst.display()))
            .arg(format!("-DSCR_VERSION_WANTED={wanted}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains("3.0"), "SCR {wanted}: {text}");
    }
}

#[test]
fn pkg_config_and_plain_compiler_lines_build_shared_and_static() {
    let inst = install();
    let pc = |args: &[&str]| {
        Command::new("pkg-config").args(args).env("PKG_CONFIG_PATH", inst.join("lib/pkgconfig")).output().unwrap()
    };
    assert!(pc(&["--atleast-version=3", "scr"]).status.success());
    assert!(!pc(&["--atleast-version=4", "scr"]).status.success());
    assert_eq!(String::from_utf8_lossy(&pc(&["--modversion", "scrf"]).stdout).trim(), "3.0");
    let flags = |args: &[&str]| String::from_utf8_lossy(&pc(args).stdout).trim().to_string();
    let shared = flags(&["--cflags", "--libs", "scr"]);
    assert!(shared.contains("-lscr") && shared.contains(&format!("-I{}/include", inst.display())), "{shared}");
    // Static links: the archive, then what pkg-config --static adds (MPI, libm, ...), or just
    // -lm on a plain mpicc line.
    let static_libs = flags(&["--libs-only-other", "--libs-only-l", "--static", "scr"]).replace("-lscr", "");
    let source = common::repo().join("examples/c/api_checks.c").display().to_string();
    let archive = format!("{}/lib/libscr.a", inst.display());
    for (name, link) in
        [("shared", shared), ("static", format!("{archive} {static_libs}")), ("plain", format!("{archive} -lm"))]
    {
        let out = inst.join(format!("api_checks_{name}"));
        build(
            Command::new("sh").arg("-c").arg(format!(
                "mpicc -Wall -Werror -I{}/include {source} -o {} {link}",
                inst.display(),
                out.display()
            )),
            &format!("mpicc ({name})"),
        );
        assert_eq!(needs(&out, "libscr"), name == "shared", "{name}");
        let job = Job::new();
        let r = run(&job, &out.display().to_string(), &["legacy"]);
        assert_eq!(r.check("complete_checkpoint"), "1", "{name}: {}", r.dump());
        assert_eq!(r.check("version"), "scr-rs 0.1.0");
    }
    // A mixed C/Fortran program on a plain mpif90 line, static (libscrf.a, then libscr.a,
    // nothing else) and shared (-lscrf -lscr): the C half sees the Fortran half's SCR_INIT.
    let fortran = common::repo().join("examples/fortran");
    let lib = inst.join("lib").display().to_string();
    for (name, link) in [
        ("static", vec![format!("{lib}/libscrf.a"), format!("{lib}/libscr.a")]),
        ("shared", vec![format!("-L{lib}"), "-lscrf".into(), "-lscr".into(), format!("-Wl,-rpath,{lib}")]),
    ] {
        let out = inst.join(format!("mixed_{name}"));
        build(
            Command::new("mpif90")
                .args(["-DMIXED", &format!("-I{}/include", inst.display())])
                .arg(fortran.join("test_api.F90"))
                .arg(fortran.join("mixed.c"))
                .args(&link)
                .arg("-o")
                .arg(&out),
            &format!("mpif90 mixed ({name})"),
        );
        assert_eq!(needs(&out, "libscr"), name == "shared", "{name}");
        let r = run(&Job::new(), &out.display().to_string(), &["1"]);
        assert!(r.has("MIXED c_sees_init=1") && r.has("DONE steps=1..1"), "{name}: {}", r.dump());
    }
    // Commands report both versions.
    let v = build(Command::new(inst.join("bin/scr_index")).arg("--version"), "scr_index --version");
    assert_eq!(v.trim(), "scr_index (scr-rs 0.1.0, SCR API 3.0)");
}
