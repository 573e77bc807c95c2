//! Test harness: compiles the C example programs against `scr.h` and `libscr.so` with
//! `mpicc`, and runs them under a real `mpirun` with 4 oversubscribed ranks in a private
//! job directory (prefix, cache and control directories of its own). [`slurm`] starts a
//! private Slurm cluster for the tests that run jobs the way a batch script does.
#![allow(dead_code)]

pub mod slurm;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const NP: usize = 4;

/// `target/<profile>`, where cargo put `libscr.so`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python that runs mpi4py programs, as `scripts/python.sh` picks it: the python3 first on
/// PATH when it imports mpi4py, else the virtual environment `scripts/setup.sh` made for it. The
/// examples' instructions and the tests run the same interpreter.
pub fn python() -> String {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let out =
                Command::new("bash").arg(repo().join("scripts/python.sh")).output().expect("run scripts/python.sh");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "no Python with mpi4py: {err}");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .clone()
}

/// `cargo test` does not always refresh `target/<profile>/libscr.so`; build it once per test
/// process so the C programs link against the code under test.
fn build_cdylib() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let release = target_dir().ends_with("release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "scr", "--lib"]).current_dir(repo());
        if release {
            cmd.arg("--release");
        }
        assert!(cmd.status().expect("cargo runs").success(), "building libscr.so failed");
    });
}

/// `libscr_preload.so`, built once per test process.
pub fn preload_lib() -> PathBuf {
    build_preload();
    target_dir().join("libscr_preload.so")
}

fn build_preload() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let release = target_dir().ends_with("release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "scr-preload"]).current_dir(repo());
        if release {
            cmd.arg("--release");
        }
        assert!(cmd.status().expect("cargo runs").success(), "building libscr_preload.so failed");
    });
}

/// Compile an unmodified application `examples/preload/<file>` with the MPI compiler wrapper
/// for its language (`mpicc`, `mpicxx`, `mpif90`) and `extra` flags, once per test process.
pub fn app(file: &str, extra: &[&str]) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<std::collections::HashMap<String, PathBuf>>> = OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    let key = format!("{file} {}", extra.join(" "));
    if let Some(p) = map.get(&key) {
        return p.clone();
    }
    let compiler = match file.rsplit('.').next() {
        Some("c") => "mpicc",
        Some("cpp") => "mpicxx",
        Some("f90") => "mpif90",
        other => panic!("no compiler for {other:?}"),
    };
    let out_dir = target_dir().join(format!("preload-examples-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(format!("{}-{}", file.replace('.', "_"), map.len()));
    let status = Command::new(compiler)
        .arg("-O2")
        .arg(repo().join("examples/preload").join(file))
        .args(extra)
        .arg("-o")
        .arg(&out)
        .current_dir(&out_dir)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} runs (scripts/setup.sh installs it): {e}"));
    assert!(status.success(), "compiling {file} failed");
    map.insert(key, out.clone());
    out
}

/// Let a program paused at `DIR/paused.<step>` (`test_api --pause-before`) go on: `how` is
/// `crash` to make it die there. The file appears whole (written aside, then renamed): the
/// program polls for it and reads it at once, so a file made empty and then written could be
/// read before its word is in it.
pub fn resume_gate(g: &Path, step: u32, how: &str) {
    let tmp = g.join(format!(".resume.{step}.tmp"));
    std::fs::write(&tmp, how).unwrap();
    std::fs::rename(&tmp, g.join(format!("resume.{step}"))).unwrap();
}

/// Compile `examples/c/<name>.c` once per test process.
pub fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<std::collections::HashMap<String, PathBuf>>> = OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    if let Some(p) = map.get(name) {
        return p.clone();
    }
    let lib = target_dir();
    build_cdylib();
    let out_dir = lib.join(format!("c-examples-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(name);
    let status = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(repo().join("include"))
        .arg(repo().join(format!("examples/c/{name}.c")))
        .arg("-L")
        .arg(&lib)
        .arg("-lscr")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("mpicc runs (install MPI: scripts/setup.sh)");
    assert!(status.success(), "compiling {name}.c failed");
    map.insert(name.to_string(), out.clone());
    out
}

/// The output of one `mpirun`.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn has(&self, line: &str) -> bool {
        self.stdout.lines().any(|l| l.trim() == line)
    }

    /// Value of the `CHECK <what> <value>` line.
    pub fn check(&self, what: &str) -> String {
        let pre = format!("CHECK {what} ");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&pre).map(str::to_string))
            .unwrap_or_else(|| panic!("no CHECK {what} line in:\n{}\n{}", self.stdout, self.stderr))
    }

    pub fn dump(&self) -> String {
        format!("exit {:?}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }

    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A command running in the background in its own process group (killed with the group if
/// the test fails), its output collected.
pub struct Spawned {
    child: Option<std::process::Child>,
    out: Option<std::thread::JoinHandle<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

impl Spawned {
    pub fn start(mut cmd: Command) -> Spawned {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        use std::process::Stdio;
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let mut child = cmd.spawn().unwrap();
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                s
            })
        };
        let out = drain(Box::new(child.stdout.take().unwrap()));
        let err = drain(Box::new(child.stderr.take().unwrap()));
        Spawned { child: Some(child), out: Some(out), err: Some(err) }
    }

    /// Wait until `ready()` holds (the job reached a point); fails if the job ends first.
    pub fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
        while !ready() {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the job ended ({st}) before {what}:\n{}", self.finish_output());
            }
            assert!(std::time::Instant::now() < deadline, "the job never reached {what} (hung?)");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Wait until `path` exists (the job reached a gate); fails if the job ends first.
    pub fn wait_for(&mut self, path: &Path) {
        self.wait_until(&path.display().to_string(), || path.exists());
    }

    /// Send `sig` to the whole job (`mpirun` and every rank): SIGSTOP holds it where it is.
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            signal_job(c.id() as i32, sig);
        }
    }

    /// The job's processes now (`mpirun`, its daemons, the ranks).
    pub fn processes(&self) -> Vec<i32> {
        self.child.as_ref().map(|c| job_tree(c.id() as i32)).unwrap_or_default()
    }

    /// Kill the whole job now (SIGKILL to its process group) and return what it printed.
    pub fn kill(mut self) -> String {
        if let Some(mut c) = self.child.take() {
            kill_group(&c);
            let _ = c.wait();
        }
        self.finish_output()
    }

    fn finish_output(&mut self) -> String {
        let out = self.out.take().map(|h| h.join().unwrap()).unwrap_or_default();
        let err = self.err.take().map(|h| h.join().unwrap()).unwrap_or_default();
        format!("{out}{err}")
    }

    /// Wait for the command to end.
    pub fn finish(mut self) -> Run {
        let mut child = self.child.take().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(400);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                kill_group(&child);
                panic!("the job did not end");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        Run {
            code: status.code(),
            stdout: self.out.take().unwrap().join().unwrap(),
            stderr: self.err.take().unwrap().join().unwrap(),
        }
    }
}

fn kill_group(child: &std::process::Child) {
    signal_job(child.id() as i32, libc::SIGKILL);
}

/// Send `sig` to every process of a job at once: the process group the test created for
/// `mpirun` and every process below it (Open MPI starts each rank in a process group of its
/// own, so signalling the group alone leaves the ranks running until they notice).
fn signal_job(pid: i32, sig: i32) {
    let all = job_tree(pid);
    for p in all.iter().rev() {
        // SAFETY: signalling processes this test started (the job's process tree).
        unsafe { libc::kill(*p, sig) };
    }
    // SAFETY: signalling the process group this test created for the child.
    unsafe { libc::kill(-pid, sig) };
}

/// Process `pid` and every process below it.
fn job_tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the command may hold spaces and parentheses
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            if ppid == Some(parent) && !all.contains(&p) {
                all.push(p);
            }
        }
        i += 1;
    }
    all
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(&c);
            let _ = c.wait();
        }
    }
}

/// One SCR job: its own prefix, cache and control directories and environment.
pub struct Job {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub prefix: PathBuf,
    pub cache: PathBuf,
    env: Vec<(String, String)>,
    /// Simulated cluster: the node of each rank (see `scripts/sim-node.sh`).
    nodes: Option<Vec<String>>,
    /// Run programs under `LD_PRELOAD=libscr_preload.so` (transparent mode).
    preload: bool,
    /// Other libraries preloaded with it: (path, whether before it in `LD_PRELOAD`).
    preload_also: Vec<(PathBuf, bool)>,
}

impl Job {
    pub fn new() -> Job {
        let dir = tempfile::Builder::new().prefix("scr-test-").tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let prefix = root.join("prefix");
        let cache = root.join("cache");
        std::fs::create_dir_all(&prefix).unwrap();
        let mut job = Job {
            _dir: dir,
            root,
            prefix,
            cache,
            env: Vec::new(),
            nodes: None,
            preload: false,
            preload_also: Vec::new(),
        };
        job.set("SCR_PREFIX", &job.prefix.display().to_string());
        job.set("SCR_CACHE_BASE", &job.cache.display().to_string());
        job.set("SCR_CNTL_BASE", &job.cache.display().to_string());
        job.set("SCR_COPY_TYPE", "SINGLE");
        job
    }

    /// A job on a simulated cluster: each rank runs on the node `nodes[rank]` names, with its
    /// own host name and its own node-local storage (cache and control directories).
    pub fn cluster(nodes: &[&str]) -> Job {
        let mut job = Job::new();
        job.cache = job.root.join("node/cache");
        let (cache, cntl) = (job.cache.display().to_string(), job.root.join("node/cntl").display().to_string());
        job.set("SCR_CACHE_BASE", &cache).set("SCR_CNTL_BASE", &cntl);
        job.map(nodes);
        job
    }

    /// Map ranks to nodes for the next runs (a node never used before is a spare).
    pub fn map(&mut self, nodes: &[&str]) -> &mut Job {
        self.nodes = Some(nodes.iter().map(|s| s.to_string()).collect());
        self
    }

    /// The local storage of a simulated node, as the host sees it.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join("nodes").join(node)
    }

    /// Lose a node: its local storage is gone.
    pub fn lose_node(&self, node: &str) {
        std::fs::remove_dir_all(self.node_dir(node)).unwrap_or_else(|e| panic!("losing node {node}: {e}"));
    }

    /// Files under a simulated node's storage whose path contains `needle`.
    pub fn node_files(&self, node: &str, needle: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        walk(&self.node_dir(node), &mut |p| {
            if p.display().to_string().contains(needle) {
                out.push(p.to_path_buf());
            }
        });
        out.sort();
        out
    }

    /// The files on `node` whose name is `name` exactly (not SCR's hidden spares and logs
    /// beside them, such as `.flush.scr.spare` or `filemap_0.scrinfo.routes`), sorted.
    pub fn node_files_named(&self, node: &str, name: &str) -> Vec<PathBuf> {
        let mut v = self.node_files(node, name);
        v.retain(|p| p.file_name() == Some(std::ffi::OsStr::new(name)));
        v
    }

    pub fn set(&mut self, k: &str, v: &str) -> &mut Job {
        self.env.retain(|(key, _)| key != k);
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    pub fn unset(&mut self, k: &str) -> &mut Job {
        self.env.retain(|(key, _)| key != k);
        self
    }

    /// Preload `lib` with the preload library too, before it in `LD_PRELOAD` or after it (an
    /// allocator a site preloads, a profiling tool).
    pub fn preload_also(&mut self, lib: &Path, before: bool) -> &mut Job {
        self.preload_also.push((lib.to_path_buf(), before));
        self
    }

    /// Run the next programs under the preload library (transparent mode).
    pub fn preload(&mut self) -> &mut Job {
        build_preload();
        self.preload = true;
        self
    }

    /// Run `program` with `np` ranks from the prefix directory.
    pub fn run_np(&self, np: usize, program_name: &str, args: &[&str]) -> Run {
        let prog = program(program_name);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.run_exe(np, &[prog.display().to_string()], &args)
    }

    /// Run a command line (`exe` may be an interpreter and its script) with `np` ranks.
    pub fn run_exe(&self, np: usize, exe: &[String], args: &[String]) -> Run {
        let mut cmd = Command::new("timeout");
        cmd.arg("180");
        self.mpirun(&mut cmd, np, exe, args);
        let out = cmd.output().expect("mpirun runs (install MPI: scripts/setup.sh)");
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Append `mpirun -np NP [sim-node.sh] EXE ARGS` to `cmd`, with this job's environment
    /// (and the preload library when the job uses it).
    fn mpirun(&self, cmd: &mut Command, np: usize, exe: &[String], args: &[String]) {
        if cmd.get_program() == "mpirun" {
            cmd.arg("-np").arg(np.to_string());
        } else {
            cmd.arg("mpirun").arg("-np").arg(np.to_string());
        }
        if let Some(nodes) = &self.nodes {
            assert_eq!(nodes.len(), np, "one node name per rank");
            cmd.arg(repo().join("scripts/sim-node.sh"));
        }
        cmd.args(exe).args(args);
        self.apply_env(cmd);
        if self.preload {
            // mpirun, the launcher's helpers and sim-node.sh's shells load it too: they must
            // not notice (they never initialise MPI)
            let mut libs: Vec<PathBuf> = self.preload_also.iter().filter(|(_, b)| *b).map(|(l, _)| l.clone()).collect();
            libs.push(preload_lib());
            libs.extend(self.preload_also.iter().filter(|(_, b)| !*b).map(|(l, _)| l.clone()));
            let joined: Vec<String> = libs.iter().map(|l| l.display().to_string()).collect();
            cmd.env("LD_PRELOAD", joined.join(":"));
        }
    }

    /// Give `cmd` this job's environment (its `SCR_*` settings instead of the caller's, the
    /// Open MPI settings for an oversubscribed machine, the simulated cluster's variables) and
    /// run it from the prefix directory.
    pub fn apply_env(&self, cmd: &mut Command) {
        cmd.current_dir(&self.prefix);
        for (k, _) in std::env::vars() {
            if k.starts_with("SCR_") || k.starts_with("SLURM_") || k.starts_with("SIM_NODE") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in [
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
            ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
            ("OMPI_MCA_hwloc_base_binding_policy", "none"),
            ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
            ("OMPI_MCA_btl", "self,vader"),
        ] {
            cmd.env(k, v);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(nodes) = &self.nodes {
            cmd.env("SIM_NODE_ROOT", &self.root).env("SIM_NODE_MAP", nodes.join(","));
        }
    }

    /// A command (a program of this package, or any other) with this job's environment.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.apply_env(&mut cmd);
        cmd
    }

    /// `mpirun` of `program` with `NP` ranks in the background (on the simulated cluster's
    /// nodes if the job has them).
    pub fn spawn(&self, program_name: &str, args: &[&str]) -> Spawned {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.spawn_exe(&[program(program_name).display().to_string()], &args)
    }

    /// A command line (as [`Job::run_exe`]) with `NP` ranks in the background.
    pub fn spawn_exe(&self, exe: &[String], args: &[String]) -> Spawned {
        let mut cmd = Command::new("mpirun");
        self.mpirun(&mut cmd, NP, exe, args);
        Spawned::start(cmd)
    }

    pub fn run(&self, program_name: &str, args: &[&str]) -> Run {
        self.run_np(NP, program_name, args)
    }

    /// Copy everything the job has on disk (prefix, caches, simulated nodes), to put back
    /// with [`Job::restore`]: one expensive setup, many damage cases on it.
    pub fn snapshot(&self) -> tempfile::TempDir {
        let snap = tempfile::Builder::new().prefix("scr-snap-").tempdir().unwrap();
        let st = Command::new("cp").arg("-a").arg(format!("{}/.", self.root.display())).arg(snap.path()).status();
        assert!(st.unwrap().success(), "snapshot of {}", self.root.display());
        snap
    }

    /// Put the job's files back as [`Job::snapshot`] saw them (same paths, so the records that
    /// name them stay right).
    pub fn restore(&self, snap: &tempfile::TempDir) {
        for e in std::fs::read_dir(&self.root).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
        let st = Command::new("cp").arg("-a").arg(format!("{}/.", snap.path().display())).arg(&self.root).status();
        assert!(st.unwrap().success(), "restore of {}", self.root.display());
    }

    /// Every file below the job's root whose path ends with `suffix` (a name, or a path tail
    /// such as `scr.dataset.5/ckpt.5/rank_1.ckpt`).
    pub fn find(&self, suffix: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        walk(&self.root, &mut |p| {
            if p.display().to_string().ends_with(suffix) {
                out.push(p.to_path_buf());
            }
        });
        out.sort();
        out
    }

    /// Remove every node-local directory (a lost cache).
    pub fn wipe_cache(&self) {
        let _ = std::fs::remove_dir_all(&self.cache);
    }

    /// The JSON body of a metadata file (after its one-line header).
    pub fn meta(&self, path: &Path) -> serde_json::Value {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let body = text.split_once('\n').unwrap().1;
        serde_json::from_str(body).unwrap()
    }

    pub fn index(&self) -> serde_json::Value {
        self.meta(&self.prefix.join(".scr/index.scr"))
    }

    /// Files under the cache directory whose path contains `needle`, leaving out the trash of
    /// deleted datasets (`.deleting/`, emptied in the background: a run that ends abruptly
    /// may leave some there until the next one starts).
    pub fn cached_files(&self, needle: &str) -> Vec<String> {
        self.files_in_cache(needle).into_iter().filter(|s| !s.contains("/.deleting/")).collect()
    }

    /// Files in the trash of deleted datasets whose path contains `needle`.
    pub fn trashed_files(&self, needle: &str) -> Vec<String> {
        self.files_in_cache(needle).into_iter().filter(|s| s.contains("/.deleting/")).collect()
    }

    fn files_in_cache(&self, needle: &str) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.cache, &mut |p| {
            let s = p.display().to_string();
            if s.contains(needle) {
                out.push(s);
            }
        });
        out
    }
}

/// Call `f` on every file below `dir`.
/// `scripts/templates/<name>` written into `dir` with its bin directory (`@BINDIR@`) filled in
/// as `scripts/install.sh` does, pointing at this build's commands; executable.
pub fn template(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(repo().join("scripts/templates").join(name)).unwrap();
    let out = dir.join(name);
    std::fs::write(&out, text.replace("@BINDIR@", &target_dir().display().to_string())).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    out
}

pub fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, f);
            } else {
                f(&p);
            }
        }
    }
}

/// A relative path that climbs from any directory to the absolute path `target`.
pub fn climbing_to(target: &Path) -> String {
    format!("{}{}", "../".repeat(40), target.display().to_string().trim_start_matches('/'))
}

/// Rewrite every path (`"rel"`) recorded in the SCR metadata file `path` (a metadata record, or
/// a redundancy file: payload, header record, header length) to `escape` (e.g. an absolute
/// path, or [`climbing_to`] one), with a valid header and checksum: what someone who can write
/// into the prefix can do. Panics if the file records no path.
pub fn escape_paths(path: &Path, escape: &str) {
    let b = std::fs::read(path).unwrap();
    if b.starts_with(b"SCRMETA ") {
        std::fs::write(path, escape_meta(&b, escape)).unwrap();
    } else {
        let n = b.len();
        let len = u64::from_le_bytes(b[n - 8..].try_into().unwrap()) as usize;
        let header = escape_meta(&b[n - 8 - len..n - 8], escape);
        let mut out = b[..n - 8 - len].to_vec();
        out.extend_from_slice(&header);
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        std::fs::write(path, out).unwrap();
    }
}

/// A metadata record (`SCRMETA 1 <kind> <len> <crc>` and a JSON body) with every `"rel"`
/// replaced by `escape`, re-encoded with a correct length and checksum.
pub fn escape_meta(bytes: &[u8], escape: &str) -> Vec<u8> {
    fn walk(v: &mut serde_json::Value, escape: &str, n: &mut usize) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k == "rel" && x.is_string() {
                        *x = escape.into();
                        *n += 1;
                    } else {
                        walk(x, escape, n);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, escape, n)),
            _ => {}
        }
    }
    let nl = bytes.iter().position(|b| *b == b'\n').unwrap();
    let kind = std::str::from_utf8(&bytes[..nl]).unwrap().split(' ').nth(2).unwrap().to_string();
    let mut body: serde_json::Value = serde_json::from_slice(&bytes[nl + 1..]).unwrap();
    let mut n = 0;
    walk(&mut body, escape, &mut n);
    assert!(n > 0, "no path recorded in this {kind} record");
    let body = serde_json::to_vec_pretty(&body).unwrap();
    let mut out = format!("SCRMETA 1 {kind} {} {:08x}\n", body.len(), crc32fast::hash(&body)).into_bytes();
    out.extend_from_slice(&body);
    out
}
