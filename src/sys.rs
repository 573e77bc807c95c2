//! The libc calls of the library outside its boundaries, as small safe functions (foundation
//! layer). The crate denies `unsafe_code`; the only other places allowed it are the C API
//! ([`crate::capi`]) and the MPI wrapper ([`crate::comm`]). Each function here states why its
//! call is sound (`// SAFETY:`) and keeps the call's errno as an [`io::Error`] where callers
//! look at it.

pub(crate) mod mapped;

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// The effective user id of this process (`geteuid(2)`).
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Send `sig` to process `pid` (`kill(2)`); the error carries errno (`ESRCH`, `EPERM`, ...).
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory effects; it only takes two integers.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Kill this process with `SIGKILL` (which cannot be caught, so nothing of it runs after).
pub(crate) fn kill_self() -> ! {
    // SAFETY: kill(2) with this process's own id and a valid signal number has no memory
    // effects; getpid has no preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL to oneself is delivered before kill returns; never reached.
    loop {
        std::thread::park();
    }
}

/// A whole-file record lock request of type `l_type` (`F_WRLCK`, `F_UNLCK`) with `fcntl`
/// command `cmd` (`F_OFD_SETLK`, `F_OFD_SETLKW`, `F_SETLK`, `F_SETLKW`) on `fd`. The error
/// carries errno (`EINTR`, `EINVAL` for a kernel without OFD locks, `EAGAIN`/`EACCES` when
/// another holds it, `ENOLCK`, ...); nothing is retried here.
pub(crate) fn lock_whole_file(fd: BorrowedFd<'_>, cmd: libc::c_int, l_type: libc::c_int) -> io::Result<()> {
    // SAFETY: an all-zero flock is a valid value of this plain C struct (start 0, length 0:
    // the whole file; l_pid 0, as OFD locks require).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = l_type as _;
    fl.l_whence = libc::SEEK_SET as _;
    // SAFETY: the set-lock commands only read `fl`, which lives across the call; the
    // descriptor is borrowed, so open for the call.
    if unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &fl) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `fd` is on a file system held in memory (tmpfs, ramfs): there populating a mapping
/// costs no I/O, and `fsync` does nothing (`noop_fsync`), so a durable write can skip it.
/// `false` when that cannot be told.
pub(crate) fn in_memory_fs(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct; fstatfs fills it
    // for a descriptor borrowed for the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    matches!(st.f_type as libc::c_long, libc::TMPFS_MAGIC | RAMFS_MAGIC)
}

/// `flock(2)` with operation `op` (`LOCK_EX`, `LOCK_UN`) on `fd`; the error carries errno.
pub(crate) fn flock(fd: BorrowedFd<'_>, op: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a borrowed (so open) descriptor has no memory effects.
    if unsafe { libc::flock(fd.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The account name of `uid` in the user database (`getpwuid_r`), if it has a non-empty
/// UTF-8 one.
pub(crate) fn account_name(uid: u32) -> Option<String> {
    // SAFETY: an all-zero passwd is a valid value (null pointers, zero ids); getpwuid_r
    // writes only into `pwd`, `buf` (whose length is given) and `out`. The returned pw_name
    // points into `buf`, which outlives its use here.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out);
        if rc == 0 && !out.is_null() && !pwd.pw_name.is_null() {
            if let Ok(s) = CStr::from_ptr(pwd.pw_name).to_str() {
                if !s.is_empty() {
                    return Some(s.to_string());
                }
            }
        }
        None
    }
}

/// The node name (`uname(2)`'s `nodename`), if it is UTF-8.
pub(crate) fn node_name() -> Option<String> {
    // SAFETY: an all-zero utsname is valid (arrays of zero bytes); uname fills the struct we
    // own; the kernel NUL-terminates nodename.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) == 0 {
            if let Ok(s) = CStr::from_ptr(u.nodename.as_ptr()).to_str() {
                return Some(s.to_string());
            }
        }
    }
    None
}

/// The local broken-down time of `secs` (seconds since the epoch) and its offset from UTC in
/// seconds (`localtime_r`); UTC with offset 0 (`gmtime_r`) if the local zone cannot be
/// applied.
pub(crate) fn local_tm(secs: i64) -> (libc::tm, i64) {
    let t = secs as libc::time_t;
    // SAFETY: an all-zero tm is a valid value (its tm_zone pointer null); localtime_r and
    // gmtime_r write only into the tm we own and read the time_t passed by reference. Both
    // are thread-safe (unlike localtime).
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            let mut utc: libc::tm = std::mem::zeroed();
            libc::gmtime_r(&t, &mut utc);
            return (utc, 0);
        }
        let off = tm.tm_gmtoff;
        (tm, off)
    }
}

/// The UTC broken-down time of `secs` (seconds since the epoch, `gmtime_r`); `None` if it
/// cannot be represented.
pub(crate) fn utc_tm(secs: i64) -> Option<libc::tm> {
    let t = secs as libc::time_t;
    // SAFETY: an all-zero tm is a valid value (its tm_zone pointer null); gmtime_r writes
    // only into the tm we own and reads the time_t passed by reference; it is thread-safe.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        (!libc::gmtime_r(&t, &mut tm).is_null()).then_some(tm)
    }
}

/// Seconds since the epoch of `text`, a local time in `strptime` format `format`, all of it
/// consumed (`strptime`, then `mktime`, which applies the local zone and daylight saving).
pub(crate) fn parse_local_time(text: &str, format: &std::ffi::CStr) -> Option<i64> {
    let c = std::ffi::CString::new(text).ok()?;
    // SAFETY: a zeroed tm is valid; strptime reads the two NUL-terminated strings we own,
    // writes into the tm we own, and returns NULL or a pointer into `c`, which outlives the
    // call; mktime normalises that tm.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let end = libc::strptime(c.as_ptr(), format.as_ptr(), &mut tm);
        if end.is_null() || *end != 0 {
            return None;
        }
        tm.tm_isdst = -1;
        let t = libc::mktime(&mut tm);
        (t != -1).then_some(t as i64)
    }
}

/// Make the calling thread background work: the `SCHED_BATCH` policy (waking it never
/// preempts a running thread; it gets the CPU at the scheduler's next tick instead) and nice
/// value `nice` (`setpriority` on its thread id). Neither needs privileges; a failure is
/// ignored (the thread only runs as it did).
pub(crate) fn lower_thread_priority(nice: libc::c_int) {
    // SAFETY: pid 0 and our own thread id name this thread only; the parameter is a valid
    // `sched_param` for a non-real-time policy (priority 0).
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

/// This process's id (`getpid(2)`), read once per process: the value is kept and a
/// `pthread_atfork` child handler forgets it, so a child made by `fork` reads its own. A hooked
/// call asks on every path under the prefix (a system call of about 0.5 us on these VMs, where
/// a solver checks for its stop file thousands of times). A child made by `vfork` shares this
/// memory until it calls `exec` or `_exit`, the only calls POSIX allows it. A process
/// made by the raw `clone` or `fork` system call, bypassing libc, would see its parent's id.
/// Where the handler cannot be registered, every call asks the kernel.
pub(crate) fn pid() -> u32 {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    static PID: AtomicU32 = AtomicU32::new(0);
    static KEPT: AtomicBool = AtomicBool::new(false);
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| KEPT.store(at_fork_child(forget).is_ok(), Ordering::Relaxed));
    let p = std::process::id();
    if KEPT.load(Ordering::Relaxed) {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// Swap the files at `a` and `b` in one step (`renameat2(2)` with `RENAME_EXCHANGE`): each
/// name then holds the other's file; a reader of either sees one whole file, never none. Fails
/// with `ENOENT` when either is missing and `EINVAL` where the file system cannot exchange.
pub(crate) fn rename_exchange(a: &Path, b: &Path) -> io::Result<()> {
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(io::Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that live through the call.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Run `child` in the child process after every `fork` (`pthread_atfork`). `child` runs in
/// a child of a multi-threaded process, so it must only do async-signal-safe things (such
/// as storing to an atomic): being an `extern "C" fn()` it cannot capture anything.
pub(crate) fn at_fork_child(child: extern "C" fn()) -> io::Result<()> {
    // SAFETY: registering a plain function pointer, valid for the life of the program.
    match unsafe { libc::pthread_atfork(None, None, Some(child)) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// 64-bit words at the start of a file, mapped shared (`mmap`): every process that maps the
/// same file sees the same words, without a system call per access (a counter children
/// bump, the ranks of a node posting their sync-point flags). The mapping ends when the value
/// drops.
pub(crate) struct SharedWords {
    at: *mut libc::c_void,
    words: usize,
}

// SAFETY: the pointer is only used as `AtomicU64`s (which any thread may use) for as long as
// the value lives; the mapping is removed only by `drop`, which has the value exclusively.
unsafe impl Send for SharedWords {}
// SAFETY: as above; all access through `&self` is atomic.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    /// Map the first `words` 64-bit words of `fd`, a regular file at least that long opened
    /// for reading and writing.
    pub(crate) fn map(fd: BorrowedFd<'_>, words: usize) -> io::Result<SharedWords> {
        let len = words.max(1) * 8;
        // SAFETY: a new shared mapping of `len` bytes chosen by the kernel (no existing memory
        // is replaced); the descriptor is borrowed, so open, and a mapping outlives its close.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(SharedWords { at: p, words: words.max(1) })
        }
    }

    /// Word `i` (panics beyond the mapping).
    pub(crate) fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "word {i} of a mapping of {}", self.words);
        // SAFETY: mapped, page-aligned (so 8-aligned) bytes, readable and writable, that stay
        // mapped while `self` lives; `i` is within them; other processes touch them only
        // atomically too.
        unsafe { &*(self.at.cast::<AtomicU64>().add(i)) }
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer borrowed (`word`'s borrows end with
        // `&self`).
        unsafe { libc::munmap(self.at, self.words * 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_background_thread_runs_batch_at_nice_10_and_the_caller_is_unchanged() {
        // SAFETY (all three): queries of the calling thread's own scheduling, no side effects.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t) };
        let (p0, n0) = (policy(), nice());
        let (p, n) = std::thread::spawn(move || {
            lower_thread_priority(10);
            (policy(), nice())
        })
        .join()
        .unwrap();
        assert_eq!(p, libc::SCHED_BATCH);
        // (an absolute value: a caller already nicer than 10 cannot go back without privileges)
        assert_eq!(n, n0.max(10));
        assert_eq!((policy(), nice()), (p0, n0));
    }

    #[test]
    fn a_file_on_tmpfs_is_in_memory_and_one_of_procfs_is_not() {
        // (the skipped fsyncs of metadata files depend on it: crate::persist)
        let proc = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(!in_memory_fs(proc.as_fd()));
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        if mounts.lines().any(|l| l.split(' ').nth(1) == Some("/dev/shm") && l.split(' ').nth(2) == Some("tmpfs")) {
            let f = tempfile::tempfile_in("/dev/shm").unwrap();
            assert!(in_memory_fs(f.as_fd()));
        }
    }

    #[test]
    fn the_kept_process_id_is_the_childs_own_after_fork() {
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id());
        // SAFETY: the child only reads its id through `pid` (an atomic and, at first, getpid)
        // and leaves with `_exit`, as a child of a multi-threaded process may.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: getpid has no preconditions; _exit ends the child at once.
            let ok = pid() == unsafe { libc::getpid() } as u32;
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child made above, into a local.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child saw its parent's id");
        assert_eq!(pid(), std::process::id());
    }

    #[test]
    fn errno_is_kept() {
        // no such process (pid_max is below 2^22 on Linux)
        assert_eq!(kill(i32::MAX, 0).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        assert_eq!(kill(std::process::id() as i32, 0).ok(), Some(()));
        let dir = std::env::temp_dir().join(format!("scr-sys-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("l");
        let open = || std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&p).unwrap();
        // two open file descriptions: each lock excludes the other
        let (a, b) = (open(), open());
        flock(a.as_fd(), libc::LOCK_EX).unwrap();
        assert_eq!(
            flock(b.as_fd(), libc::LOCK_EX | libc::LOCK_NB).unwrap_err().raw_os_error(),
            Some(libc::EWOULDBLOCK)
        );
        flock(a.as_fd(), libc::LOCK_UN).unwrap();
        flock(b.as_fd(), libc::LOCK_EX | libc::LOCK_NB).unwrap();
        lock_whole_file(a.as_fd(), libc::F_OFD_SETLK, libc::F_WRLCK).unwrap();
        assert_eq!(
            lock_whole_file(b.as_fd(), libc::F_OFD_SETLK, libc::F_WRLCK).unwrap_err().raw_os_error(),
            Some(libc::EAGAIN)
        );
        lock_whole_file(a.as_fd(), libc::F_OFD_SETLK, libc::F_UNLCK).unwrap();
        lock_whole_file(b.as_fd(), libc::F_OFD_SETLK, libc::F_WRLCK).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shared_words_are_shared_between_mappings() {
        use std::sync::atomic::Ordering;
        let dir = std::env::temp_dir().join(format!("scr-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c");
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        f.set_len(16).unwrap();
        let a = SharedWords::map(f.as_fd(), 2).unwrap();
        let g = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let b = SharedWords::map(g.as_fd(), 2).unwrap();
        drop((f, g));
        a.word(0).fetch_add(3, Ordering::SeqCst);
        a.word(1).store(5, Ordering::SeqCst);
        assert_eq!((b.word(0).load(Ordering::SeqCst), b.word(1).load(Ordering::SeqCst)), (3, 5));
        drop(a);
        assert_eq!(b.word(0).load(Ordering::SeqCst), 3);
        drop(b);
        assert_eq!(std::fs::read(&p).unwrap(), [3u64.to_ne_bytes(), 5u64.to_ne_bytes()].concat());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
