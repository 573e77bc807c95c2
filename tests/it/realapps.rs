//! Real applications under the preload (transparent mode): LAMMPS, OpenFOAM and Quantum
//! ESPRESSO, unmodified, as Debian packages them (`scripts/setup.sh` installs them as root;
//! without them each test says which packages are missing and passes as skipped).
//!
//! Each case runs the application twice in the same way, once under `libscr_preload.so` and
//! once without it: a first run that writes checkpoint files and ends abruptly (LAMMPS:
//! `MPI_Abort` from an `include` of a missing file, right after its last restart file;
//! OpenFOAM and Quantum ESPRESSO: their own stop, at `endTime` two steps after the last
//! time directory, and at `electron_maxstep` or after the MD steps), then the application's
//! own restart; each application is also killed with SIGKILL mid-run (every process of the
//! job) once a checkpoint is complete in every rank's filemap. The continuation under the
//! preload must print the same thermo lines, solver residuals or energies as the one without
//! it, digit for digit, and the checkpoint bytes SCR restarts from must be the bytes the
//! application wrote without SCR (the applications are deterministic with the same 4 ranks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{Job, Run, NP};

/// Whether every command is installed; if not, say which packages provide them.
fn have(cmds: &[&str], packages: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> =
        cmds.iter().copied().filter(|c| !std::env::split_paths(&path).any(|d| d.join(c).is_file())).collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!(
        "SKIPPED: {} not installed; as root scripts/setup.sh installs them (apt-get install --no-install-recommends {packages})",
        missing.join(", ")
    );
    false
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The bytes of `rel` the application would read now: the prefix file, else the copy in the
/// newest cached dataset (on any simulated node).
fn held(job: &Job, rel: &str) -> Option<Vec<u8>> {
    let in_prefix = job.prefix.join(rel);
    if in_prefix.is_file() {
        return std::fs::read(in_prefix).ok();
    }
    let dataset = |p: &Path| -> Option<u64> {
        let s = p.to_str()?;
        let tail = &s[s.rfind("/scr.dataset.")? + "/scr.dataset.".len()..];
        tail.split('/').next()?.parse().ok()
    };
    let mut copies: Vec<(u64, PathBuf)> = job
        .find(&format!("/{rel}"))
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains("/.deleting/") && !p.to_string_lossy().contains("/.scr/"))
        .filter_map(|p| Some((dataset(&p)?, p)))
        .collect();
    copies.sort();
    copies.last().and_then(|(_, p)| std::fs::read(p).ok())
}

/// Assert that `job` holds the same bytes of each file as `base` has in its prefix.
fn same_bytes(job: &Job, base: &Job, files: &[String], what: &str) {
    for f in files {
        let want = std::fs::read(base.prefix.join(f)).unwrap_or_else(|e| panic!("{what}: baseline {f}: {e}"));
        let got = held(job, f).unwrap_or_else(|| panic!("{what}: SCR holds no {f}: {:?}", job.find(f)));
        assert!(
            got == want,
            "{what}: {f}: {} bytes under the preload differ from the {} bytes without it",
            got.len(),
            want.len()
        );
    }
}

/// The lines of `r`'s standard output that `keep` selects (what the comparison is about).
fn lines(r: &Run, keep: impl Fn(&str) -> bool) -> Vec<String> {
    r.stdout.lines().filter(|l| keep(l)).map(str::to_string).collect()
}

/// Files of a cached dataset: (path relative to the prefix, where its bytes are).
type Files = Vec<(PathBuf, PathBuf)>;

/// The datasets complete in every rank's filemap (the control directory's record of the
/// cache: checkpoints SCR has finished protecting, whatever a kill hits next), by id: their
/// names and every rank's files (path relative to the prefix, where the bytes are in cache).
fn complete_everywhere(job: &Job) -> BTreeMap<u64, (String, Files)> {
    let mut all: BTreeMap<u64, (String, Files, usize)> = BTreeMap::new();
    for rank in 0..NP {
        for p in job.find(&format!("/filemap_{rank}.scrinfo")) {
            let Ok(fm) = scr::state::filemap::Filemap::load(&p) else { continue };
            for (id, d) in fm.datasets.iter().filter(|(_, d)| d.complete) {
                let e = all.entry(*id).or_insert_with(|| (d.desc.name.clone(), Vec::new(), 0));
                e.1.extend(d.files.iter().map(|f| (f.rel.clone(), f.path.clone())));
                e.2 += 1;
            }
        }
    }
    all.into_iter().filter(|(_, e)| e.2 == NP).map(|(id, (n, f, _))| (id, (n, f))).collect()
}

// ---------------------------------------------------------------------------------------
// LAMMPS: the LJ melt, restart files every 50 steps, a crash after step 200, read_restart.

const MELT: &str = "units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 8 0 8 0 8
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 3.0 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify every 20 delay 0 check no
fix 1 all nve
thermo 25
restart 50 RESTART
run 200
# the crash: rank 0 cannot open this file and calls MPI_Abort
include crash.here
";

const CONT: &str = "read_restart READ
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify every 20 delay 0 check no
fix 1 all nve
thermo 25
run 100
";

/// Thermo lines: a step number and five numbers.
fn thermo(r: &Run) -> Vec<String> {
    lines(r, |l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() == 6 && w.iter().all(|x| x.parse::<f64>().is_ok())
    })
}

fn lammps_inputs(job: &Job, restart: &str, read: &str) {
    std::fs::write(job.prefix.join("in.melt"), MELT.replace("RESTART", restart)).unwrap();
    std::fs::write(job.prefix.join("in.cont"), CONT.replace("READ", read)).unwrap();
}

fn lmp(job: &Job, input: &str) -> Run {
    job.run_exe(NP, &args(&["lmp"]), &args(&["-in", input, "-log", "none"]))
}

/// One LAMMPS restart shape (`restart 50 <restart>`, `read_restart <read>`; `files`: what
/// step 200 wrote) in `job` (preload configured), `damage` applied after the crash.
fn lammps_case(mut job: Job, restart: &str, read: &str, files: &[String], damage: impl FnOnce(&mut Job)) {
    if !have(&["lmp"], "lammps") {
        return;
    }
    let base = Job::new();
    lammps_inputs(&base, restart, read);
    let crashed = lmp(&base, "in.melt");
    assert!(
        crashed.code != Some(0) && crashed.stdout.contains("Cannot open input script crash.here"),
        "{}",
        crashed.dump()
    );
    let want = lmp(&base, "in.cont");
    assert_eq!(want.code, Some(0), "{}", want.dump());
    let want = thermo(&want);
    assert_eq!(want.len(), 5, "{want:?}");

    lammps_inputs(&job, restart, read);
    let r = lmp(&job, "in.melt");
    assert!(r.code != Some(0) && r.stdout.contains("Cannot open input script crash.here"), "{}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
    assert_eq!(thermo(&r), thermo(&crashed), "the first run differs under the preload\n{}", r.dump());
    same_bytes(&job, &base, files, "restart files of step 200");
    damage(&mut job);
    let r = lmp(&job, "in.cont");
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert_eq!(thermo(&r), want, "the continuation differs under the preload\n{}", r.dump());
}

/// A dataset per restart step: `lj.<step>.<rank>`, `lj.<step>.base`, `lj.<step>.mpiio` by
/// `lj.*.*` (its step, same on every rank, names it), `lj.<step>`, `lj.a`, `lj.b` by `lj.*`.
/// (`lj.*` alone would name every step's files one growing dataset, which SCR warns about.)
const LJ: &str = "lj.*.*,lj.*";

fn lammps_job() -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", LJ).set("SCR_FLUSH", "0");
    job
}

fn per_rank_files() -> Vec<String> {
    let mut f: Vec<String> = (0..NP).map(|r| format!("lj.200.{r}")).collect();
    f.push("lj.200.base".into());
    f
}

#[test]
fn lammps_restart_files_per_rank_restart_from_cache() {
    // restart 50 lj.*.%: rank 0 writes lj.<step>.base, each rank lj.<step>.<rank>
    lammps_case(lammps_job(), "lj.*.%", "lj.*.%", &per_rank_files(), |_| {});
}

#[test]
fn lammps_killed_with_sigkill_restarts_from_cache() {
    if !have(&["lmp"], "lammps") {
        return;
    }
    // a long run, killed (SIGKILL to mpirun and every rank) once step 100's restart files
    // are a dataset complete on every rank: the restart is whichever step last completed
    let job = lammps_job();
    lammps_inputs(&job, "lj.*.%", "lj.*.%");
    std::fs::write(job.prefix.join("in.melt"), MELT.replace("RESTART", "lj.*.%").replace("run 200", "run 100000"))
        .unwrap();
    let mut run = job.spawn_exe(&args(&["lmp"]), &args(&["-in", "in.melt", "-log", "none"]));
    run.wait_until("step 100 complete in cache", || {
        complete_everywhere(&job).values().any(|(_, f)| f.iter().any(|(rel, _)| rel == Path::new("lj.100.base")))
    });
    let out = run.kill();
    let r = lmp(&job, "in.cont");
    assert_eq!(r.code, Some(0), "{}\n--- the killed run\n{out}", r.dump());
    let got = thermo(&r);
    let step: u32 = got.first().and_then(|l| l.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    assert!(step >= 100 && step.is_multiple_of(50), "restarted at step {step}\n{}", r.dump());
    // the same continuation without the preload, from the bytes SCR restarted from
    let base = Job::new();
    lammps_inputs(&base, "lj.*.%", "lj.*.%");
    let mut files: Vec<String> = (0..NP).map(|r| format!("lj.{step}.{r}")).collect();
    files.push(format!("lj.{step}.base"));
    for f in &files {
        let bytes = held(&job, f).unwrap_or_else(|| panic!("SCR holds no {f}: {:?}", job.find(f)));
        std::fs::write(base.prefix.join(f), bytes).unwrap();
    }
    let want = lmp(&base, "in.cont");
    assert_eq!(want.code, Some(0), "{}", want.dump());
    assert_eq!(got, thermo(&want), "the continuation from step {step} differs under the preload\n{}", r.dump());
}

#[test]
fn lammps_restart_toggling_two_files_restarts_from_cache() {
    // restart 50 lj.a lj.b: 50 -> a, 100 -> b, 150 -> a, 200 -> b
    lammps_case(lammps_job(), "lj.a lj.b", "lj.b", &["lj.b".into()], |_| {});
}

#[test]
fn lammps_restart_one_file_per_step_restarts_from_cache() {
    lammps_case(lammps_job(), "lj.*", "lj.*", &["lj.200".into()], |_| {});
}

#[test]
fn lammps_restart_mpiio_file_restarts() {
    // restart 50 lj.*.mpiio: rank 0's header with stdio, then MPI_File_open by every rank
    // without MPI_MODE_CREATE (issue 22 item 5): one shared file in the prefix
    lammps_case(lammps_job(), "lj.*.mpiio", "lj.*.mpiio", &["lj.200.mpiio".into()], |_| {});
}

#[test]
fn lammps_restart_after_a_lost_node_with_xor() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.preload().set("SCR_PRELOAD_PATTERNS", LJ).set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR");
    lammps_case(job, "lj.*.%", "lj.*.%", &per_rank_files(), |job| {
        job.lose_node("n0");
        job.map(&["n4", "n1", "n2", "n3"]);
    });
}

#[test]
fn lammps_restart_from_the_prefix_after_a_lost_cache() {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", LJ).set("SCR_FLUSH", "2");
    lammps_case(job, "lj.*.%", "lj.*.%", &per_rank_files(), |job| {
        job.wipe_cache();
        let flushed = job.prefix.join("lj.200.base");
        assert!(flushed.is_file(), "{} was not flushed", flushed.display());
    });
}

#[test]
fn lammps_per_rank_restart_files_of_4_processes_are_read_by_2() {
    // LAMMPS reads per-processor restart files with any number of processes: each of the 2
    // reads some of the 4 ranks' lj.200.<rank> (other ranks' files, issue 26), which an
    // elastic restart from cache makes readable at their paths
    if !have(&["lmp"], "lammps") {
        return;
    }
    let cont = |job: &Job| job.run_exe(2, &args(&["lmp"]), &args(&["-in", "in.cont", "-log", "none"]));
    let base = Job::new();
    lammps_inputs(&base, "lj.*.%", "lj.*.%");
    lmp(&base, "in.melt");
    let want = cont(&base);
    assert_eq!(want.code, Some(0), "{}", want.dump());
    assert_eq!(thermo(&want).len(), 5, "{}", want.dump());
    let mut job = lammps_job();
    job.set("SCR_RESTART_ELASTIC", "1");
    lammps_inputs(&job, "lj.*.%", "lj.*.%");
    lmp(&job, "in.melt");
    same_bytes(&job, &base, &per_rank_files(), "restart files of step 200");
    let r = cont(&job);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert_eq!(thermo(&r), thermo(&want), "the continuation with 2 processes differs under the preload\n{}", r.dump());
}

// ---------------------------------------------------------------------------------------
// OpenFOAM: icoFoam's lid-driven cavity decomposed into 4, a time directory every 20 steps,
// stopped two steps after time 0.2, `startFrom latestTime`.

/// The environment the Debian OpenFOAM binaries need (their etc directory).
fn foam_env(job: &mut Job) {
    job.set("FOAM_ETC", "/usr/share/openfoam/etc").set("WM_PROJECT_DIR", "/usr/share/openfoam");
}

const CAVITY: &str = "/usr/share/doc/openfoam-examples/examples/incompressible/icoFoam/cavity/cavity";

/// The cavity case meshed and decomposed into `job`'s prefix (without the preload).
fn cavity(job: &Job) {
    let st = std::process::Command::new("cp").arg("-a").arg(format!("{CAVITY}/.")).arg(&job.prefix).status();
    assert!(st.unwrap().success(), "copying {CAVITY}");
    std::fs::write(
        job.prefix.join("system/decomposeParDict"),
        "FoamFile { version 2.0; format ascii; class dictionary; object decomposeParDict; }\n\
         numberOfSubdomains 4;\nmethod simple;\ncoeffs { n (2 2 1); }\n",
    )
    .unwrap();
    for tool in ["blockMesh", "decomposePar"] {
        let out = job.command(tool).output().unwrap();
        assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stdout));
    }
}

/// Set `startFrom` and `endTime` in the case's controlDict.
fn control(job: &Job, start_from: &str, end: &str) {
    let p = job.prefix.join("system/controlDict");
    let text = std::fs::read_to_string(&p).unwrap();
    let text: Vec<String> = text
        .lines()
        .map(|l| match l.split_whitespace().next() {
            Some("startFrom") => format!("startFrom       {start_from};"),
            Some("endTime") => format!("endTime         {end};"),
            _ => l.to_string(),
        })
        .collect();
    std::fs::write(p, text.join("\n") + "\n").unwrap();
}

fn ico(job: &Job) -> Run {
    job.run_exe(NP, &args(&["icoFoam"]), &args(&["-parallel"]))
}

/// Solver output to compare: Courant numbers, residuals, continuity errors.
fn residuals(r: &Run) -> Vec<String> {
    lines(r, |l| l.starts_with("Courant") || l.contains("residual") || l.starts_with("time step continuity"))
}

/// The fields of time `t` on every processor.
fn fields(t: &str) -> Vec<String> {
    (0..NP).flat_map(|p| ["U", "p", "phi"].map(|f| format!("processor{p}/{t}/{f}"))).collect()
}

/// The newest time whose fields are in a complete cached dataset, in tenths.
fn newest_cached_time(job: &Job) -> Option<u32> {
    job.find("/U")
        .iter()
        .filter(|p| p.to_string_lossy().contains("/scr.dataset.") && !p.to_string_lossy().contains("/.deleting/"))
        .filter_map(|p| p.parent()?.file_name()?.to_str()?.strip_prefix("0.")?.parse().ok())
        .max()
}

fn have_openfoam() -> bool {
    have(&["icoFoam", "blockMesh", "decomposePar"], "openfoam openfoam-examples") && Path::new(CAVITY).is_dir()
}

/// Without the preload: the cavity run to time `start` (stopped two steps after it), then
/// its continuation to `next` with `startFrom latestTime`: (the job, the continuation).
fn openfoam_plain(start: &str, next: &str) -> (Job, Run) {
    let mut base = Job::new();
    foam_env(&mut base);
    cavity(&base);
    control(&base, "startTime", &format!("{start}1"));
    let r = ico(&base);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    control(&base, "latestTime", next);
    let want = ico(&base);
    assert_eq!(want.code, Some(0), "{}", want.dump());
    assert!(want.stdout.contains(&format!("Time = {next}")), "{}", want.dump());
    (base, want)
}

fn openfoam_case(mut job: Job, damage: impl FnOnce(&mut Job)) {
    if !have_openfoam() {
        return;
    }
    foam_env(&mut job);
    cavity(&job);
    // the first run stops by itself two steps after writing time 0.2 (endTime 0.21 is no
    // write time): those steps' collectives make 0.2 a complete dataset, nothing is written
    // after it
    control(&job, "startTime", "0.21");
    let r = ico(&job);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
    assert_eq!(newest_cached_time(&job), Some(2), "{:?}", job.find("/U"));
    let (start, next) = ("0.2", "0.3");
    let (base, want) = openfoam_plain(start, next);
    same_bytes(&job, &base, &fields(start), &format!("fields of time {start}"));
    damage(&mut job);
    openfoam_continues(&job, &base, &want, start, next);
}

/// `job`'s restart with `startFrom latestTime` to `next` continues from `start` exactly as
/// the run without the preload did (`base`, its continuation `want`).
fn openfoam_continues(job: &Job, base: &Job, want: &Run, start: &str, next: &str) {
    control(job, "latestTime", next);
    let r = ico(job);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.stdout.contains("Starting time loop"), "{}", r.dump());
    assert_eq!(residuals(&r), residuals(want), "the continuation from {start} differs under the preload\n{}", r.dump());
    same_bytes(job, base, &fields(next), &format!("fields of time {next}"));
}

/// Time directories of a decomposed case: one dataset per time, named by it (issue 22 item 6).
const FOAM_PATTERN: &str = "processor*/[0-9]*/**";

#[test]
fn openfoam_cavity_in_4_restarts_from_cache_with_latest_time() {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", FOAM_PATTERN).set("SCR_FLUSH", "0");
    openfoam_case(job, |_| {});
}

#[test]
fn openfoam_killed_with_sigkill_restarts_from_cache() {
    if !have_openfoam() {
        return;
    }
    // a long run (endTime 10), killed (SIGKILL to mpirun and every rank) once every rank's
    // filemap has a time complete: the restart is the newest time complete then
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", FOAM_PATTERN).set("SCR_FLUSH", "0");
    foam_env(&mut job);
    cavity(&job);
    control(&job, "startTime", "10");
    let mut run = job.spawn_exe(&args(&["icoFoam"]), &args(&["-parallel"]));
    // the newest time complete on every rank, in tenths
    let complete = |job: &Job| {
        let names = complete_everywhere(job);
        names.values().filter_map(|(n, _)| n.strip_prefix("processor*/0.")?.parse::<u32>().ok()).max()
    };
    // the kill hits between two writes (as a plain file system needs for OpenFOAM to restart
    // from its latest time): the job is stopped (SIGSTOP) once a time is complete, killed if
    // no rank has begun the next time directory yet, else let go on to the next time
    let mut seen = 1;
    let newest = loop {
        run.wait_until(&format!("a time after 0.{seen} complete in cache"), || {
            complete(&job).is_some_and(|t| t > seen)
        });
        run.signal(libc::SIGSTOP);
        let t = complete(&job).unwrap_or_default();
        let begun = (0..NP).any(|p| {
            let times = std::fs::read_dir(job.prefix.join(format!("processor{p}"))).into_iter().flatten().flatten();
            times.filter_map(|e| e.file_name().to_str()?.strip_prefix("0.")?.parse::<u32>().ok()).any(|x| x > t)
        });
        if !begun {
            break t;
        }
        assert!(t < 8, "no kill between two writes up to time 0.{t}");
        run.signal(libc::SIGCONT);
        seen = t;
    };
    run.kill();
    let (start, next) = (format!("0.{newest}"), format!("0.{}", newest + 1));
    let (base, want) = openfoam_plain(&start, &next);
    same_bytes(&job, &base, &fields(&start), &format!("fields of time {start}"));
    openfoam_continues(&job, &base, &want, &start, &next);
}

#[test]
fn openfoam_cavity_restarts_after_a_lost_node_with_xor() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.preload().set("SCR_PRELOAD_PATTERNS", FOAM_PATTERN).set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR");
    openfoam_case(job, |job| {
        job.lose_node("n0");
        job.map(&["n4", "n1", "n2", "n3"]);
    });
}

// ---------------------------------------------------------------------------------------
// Quantum ESPRESSO: pw.x on silicon (the pseudopotential quantum-espresso-data ships), SCF
// stopped by its own iteration limit and MD after its steps, then restart_mode='restart'.

const PSEUDO: &str = "/usr/share/espresso/pseudo/Si.pz-vbc.UPF";

fn pw_input(calculation: &str, restart: bool, extra_control: &str, extra_electrons: &str) -> String {
    format!(
        "&control
  calculation = '{calculation}'
  restart_mode = '{}'
  prefix = 'si'
  outdir = './out'
  pseudo_dir = '/usr/share/espresso/pseudo'
  disk_io = 'low'
  {extra_control}
/
&system
  ibrav = 2, celldm(1) = 10.2, nat = 2, ntyp = 1, ecutwfc = 12.0
/
&electrons
  conv_thr = 1.0d-8
  {extra_electrons}
/
&ions
/
ATOMIC_SPECIES
 Si 28.086 Si.pz-vbc.UPF
ATOMIC_POSITIONS alat
 Si 0.00 0.00 0.00
 Si 0.27 0.25 0.25
K_POINTS automatic
 2 2 2 0 0 0
",
        if restart { "restart" } else { "from_scratch" }
    )
}

fn pw(job: &Job, input: &str, text: &str) -> Run {
    std::fs::write(job.prefix.join(input), text).unwrap();
    job.run_exe(NP, &args(&["pw.x"]), &args(&["-in", input]))
}

fn have_qe() -> bool {
    if !have(&["pw.x"], "quantum-espresso quantum-espresso-data") {
        return false;
    }
    if !Path::new(PSEUDO).is_file() {
        eprintln!("SKIPPED: {PSEUDO} missing (apt-get install --no-install-recommends quantum-espresso-data)");
        return false;
    }
    true
}

/// Energies and SCF progress.
fn energies(r: &Run) -> Vec<String> {
    lines(r, |l| {
        l.contains("total energy") || l.contains("estimated scf accuracy") || l.contains("kinetic energy (Ekin)")
    })
}

/// `first` (stops by itself), then `second` (restart_mode='restart'), with and without the
/// preload: the same energies, and the restart really continued (`continued` in its output).
fn qe_case(first: &str, second: &str, continued: &str) {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "out/**").set("SCR_FLUSH", "0");
    qe_case_in(job, first, second, continued, |_| {});
}

/// [`qe_case`] in `job` (preload configured), `damage` applied between the two runs.
fn qe_case_in(mut job: Job, first: &str, second: &str, continued: &str, damage: impl FnOnce(&mut Job)) {
    if !have_qe() {
        return;
    }
    // the first run and the restart, in `j`, with `damage` in between
    let runs = |j: &mut Job, damage: &mut dyn FnMut(&mut Job)| {
        let r1 = pw(j, "first.in", first);
        assert!(r1.stdout.contains("JOB DONE"), "{}", r1.dump());
        assert!(!r1.stderr.contains("SCR ERROR"), "{}", r1.dump());
        damage(j);
        let r2 = pw(j, "second.in", second);
        assert_eq!(r2.code, Some(0), "{}", r2.dump());
        assert!(r2.stdout.contains(continued), "{}", r2.dump());
        assert!(!r2.stderr.contains("SCR ERROR"), "{}", r2.dump());
        (energies(&r1), energies(&r2))
    };
    let want = runs(&mut Job::new(), &mut |_| {});
    assert!(!want.1.is_empty());
    let mut damage = Some(damage);
    let got = runs(&mut job, &mut |j| {
        if let Some(d) = damage.take() {
            d(j)
        }
    });
    assert_eq!(got.0, want.0, "the first run differs under the preload");
    assert_eq!(got.1, want.1, "the restarted run differs under the preload");
}

#[test]
fn quantum_espresso_scf_restarts_after_its_iteration_limit() {
    // electron_maxstep = 2: "convergence NOT achieved after 2 iterations: stopping", with the
    // wavefunctions and the mixing history of each rank written for restart_mode='restart'
    let first = pw_input("scf", false, "", "electron_maxstep = 2");
    let second = pw_input("scf", true, "", "");
    qe_case(&first, &second, "The initial density is read from file");
}

#[test]
fn quantum_espresso_md_restarts_from_its_last_step() {
    let first = pw_input("md", false, "nstep = 2\n  dt = 20", "");
    let second = pw_input("md", true, "nstep = 2\n  dt = 20", "");
    qe_case(&first, &second, "Entering Dynamics:    iteration =     3");
}

#[test]
fn quantum_espresso_md_killed_with_sigkill_restarts_from_cache() {
    if !have_qe() {
        return;
    }
    // a long MD run (nstep 100), killed (SIGKILL to mpirun and every rank) as soon as every
    // rank's filemap has an MD step's restart files (out/si.md and the rest) complete
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "out/**").set("SCR_FLUSH", "0");
    std::fs::write(job.prefix.join("first.in"), pw_input("md", false, "nstep = 100\n  dt = 20", "")).unwrap();
    let mut run = job.spawn_exe(&args(&["pw.x"]), &args(&["-in", "first.in"]));
    let md_step = |job: &Job| {
        complete_everywhere(job).into_iter().rev().find(|(_, (_, f))| f.iter().any(|(rel, _)| rel.ends_with("si.md")))
    };
    // the kill hits while a rank writes one of the next step's files (QE rewrites out/ in
    // place; a plain file system would restart from a step cut short and pw.x stop on
    // PARSE_ERR): once a step is complete, the job is stopped (SIGSTOP) as soon as a rank
    // has a file of its pending area open, and killed if it still has. The next start must
    // leave every such file out and restart from the newest complete step.
    run.wait_until("an MD step complete in cache", || md_step(&job).is_some());
    let ranks: Vec<i32> = run.processes();
    let writing = || {
        ranks.iter().any(|p| {
            std::fs::read_dir(format!("/proc/{p}/fd")).into_iter().flatten().flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|t| {
                    let t = t.to_string_lossy();
                    t.contains("/scr.pending/") && !t.contains("/.scr/") && !t.contains("/scr.pending/view.")
                })
            })
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        assert!(std::time::Instant::now() < deadline, "no rank was seen writing a pending file in 120 s");
        if writing() {
            run.signal(libc::SIGSTOP);
            if writing() {
                break;
            }
            run.signal(libc::SIGCONT);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let out = run.kill();
    // what SCR restarts from: the newest checkpoint complete on every rank
    let newest = complete_everywhere(&job).into_iter().next_back();
    let (id, (name, files)) = newest.unwrap_or_else(|| panic!("nothing complete after the kill\n{out}"));
    assert!(files.iter().any(|(rel, _)| rel.ends_with("si.md")), "dataset {id} ({name}): {files:?}");
    // the same restart without the preload, from those bytes
    let base = Job::new();
    for (rel, at) in &files {
        let to = base.prefix.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(at, &to).unwrap_or_else(|e| panic!("{}: {e}", at.display()));
    }
    let second = pw_input("md", true, "nstep = 3\n  dt = 20", "");
    let want = pw(&base, "second.in", &second);
    assert!(want.code == Some(0) && want.stdout.contains("JOB DONE"), "{}", want.dump());
    let got = pw(&job, "second.in", &second);
    assert_eq!(got.code, Some(0), "{}\n--- the killed run\n{out}", got.dump());
    assert!(!got.stderr.contains("SCR ERROR"), "{}", got.dump());
    let dynamics = |r: &Run| lines(r, |l| l.contains("Entering Dynamics"));
    let steps = dynamics(&got);
    assert!(
        steps.first().is_some_and(|l| !l.ends_with("iteration =     1")),
        "not a continuation of dataset {id} ({name}): {steps:?}\n{}",
        got.dump()
    );
    assert_eq!(steps, dynamics(&want), "restarted from another MD step than dataset {id} holds");
    assert_eq!(energies(&got), energies(&want), "the continuation of dataset {id} differs under the preload");
}

#[test]
fn quantum_espresso_md_restarts_after_a_lost_node_with_xor() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.preload().set("SCR_PRELOAD_PATTERNS", "out/**").set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR");
    let first = pw_input("md", false, "nstep = 2\n  dt = 20", "");
    let second = pw_input("md", true, "nstep = 2\n  dt = 20", "");
    qe_case_in(job, &first, &second, "Entering Dynamics:    iteration =     3", |job| {
        job.lose_node("n0");
        job.map(&["n4", "n1", "n2", "n3"]);
    });
}

#[test]
fn quantum_espresso_scf_restarts_from_the_prefix_after_a_lost_cache() {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "out/**").set("SCR_FLUSH", "2");
    let first = pw_input("scf", false, "", "electron_maxstep = 2");
    let second = pw_input("scf", true, "", "");
    qe_case_in(job, &first, &second, "The initial density is read from file", |job| {
        job.wipe_cache();
        let flushed = job.prefix.join("out/si.save/charge-density.dat");
        assert!(flushed.is_file(), "{} is not in the prefix", flushed.display());
    });
}

#[test]
fn openfoam_cavity_restarts_from_the_prefix_after_a_lost_cache() {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", FOAM_PATTERN).set("SCR_FLUSH", "2");
    openfoam_case(job, |job| {
        job.wipe_cache();
        let flushed = job.prefix.join("processor0/0.2/U");
        assert!(flushed.is_file(), "{} was not flushed", flushed.display());
    });
}
