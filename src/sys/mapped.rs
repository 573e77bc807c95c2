//! Reading a file's bytes straight from a read-only memory mapping (no copy into a buffer), for
//! the CRC32 passes of [`crate::checksum`]: a restart's verification, the background CRC32 of
//! SINGLE datasets, copies. A pass over a mapping costs about three quarters of a `read` into a
//! buffer (measured in `BENCHMARKS.md`, 2026-11-24).
//!
//! **A file that shrinks under the mapping.** Touching a mapped page beyond the end of the file
//! raises SIGBUS, which would kill the process. Every mapping made here is registered in a
//! table that a SIGBUS handler consults: a fault inside a registered mapping replaces the page
//! by a page of zeros, marks the mapping as hit and returns (the access is retried and reads
//! zeros), and [`Window::lost_pages`] then tells the pass, which fails. A fault anywhere else
//! goes to the handler that was installed before (Open MPI's, the application's) or, if there
//! was none, kills the process as it would have. The handler is (re)installed whenever a
//! mapping is made and it is not the current one, so an application that installs its own
//! later keeps being chained to.
//!
//! Whatever cannot be mapped (an empty file, a pipe, a file system without `mmap`, every slot
//! of the table in use) is read by the caller as before: [`window`] returns `None`.

use std::cell::UnsafeCell;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Mappings that may be guarded at once in one process.
const SLOTS: usize = 64;

struct Slot {
    busy: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    hit: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    busy: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    hit: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The handler that was installed before ours, written (under [`INSTALL`]) before ours is
/// installed, read by ours.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);
// SAFETY: written only under INSTALL while our handler is not the installed one, read by the
// handler after the sigaction call that installed it (a system call, which orders the write).
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::zeroed()));
static INSTALL: Mutex<()> = Mutex::new(());

/// A read-only mapping of `len` bytes of a file from `off`, guarded against SIGBUS.
pub(crate) struct Window {
    /// The mapping: `skip` bytes before `off` (to the page boundary), then the window's.
    addr: *mut libc::c_void,
    len: usize,
    skip: usize,
    slot: usize,
}

/// Map `len` (> 0) bytes of `f` from `off` (populated at once when the file is in memory,
/// faulted in as it is read otherwise, which keeps the kernel's read-ahead overlapping the
/// pass on a disk or a parallel file system); `None` when the file cannot be mapped (the
/// caller reads it instead).
pub(crate) fn window(f: &File, off: u64, len: u64) -> Option<Window> {
    if len == 0 || !install() {
        return None;
    }
    let skip = (off % PAGE.load(Ordering::Relaxed) as u64) as usize;
    let len = usize::try_from(len).ok()?.checked_add(skip)?;
    let off = off - skip as u64;
    let slot = (0..SLOTS)
        .find(|&i| TABLE[i].busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok())?;
    // SAFETY: a fresh shared read-only mapping of a file we hold open; nothing else refers to
    // the address range, which we unmap in Drop.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED | if super::in_memory_fs(f.as_fd()) { libc::MAP_POPULATE } else { 0 },
            f.as_raw_fd(),
            off as libc::off_t,
        )
    };
    if addr == libc::MAP_FAILED {
        TABLE[slot].busy.store(false, Ordering::Release);
        return None;
    }
    let s = &TABLE[slot];
    s.hit.store(false, Ordering::Relaxed);
    s.end.store(addr as usize + len, Ordering::Relaxed);
    s.start.store(addr as usize, Ordering::Release);
    Some(Window { addr, len, skip, slot })
}

impl Window {
    /// The mapped bytes. A page past the end of the file (the file shrank since it was mapped)
    /// reads as zeros; [`Window::lost_pages`] reports it.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the range is mapped readable for the life of self. The file's contents may
        // change under the mapping (as with any shared file mapping): the bytes are only summed
        // or copied, never trusted for memory safety.
        unsafe { std::slice::from_raw_parts((self.addr as *const u8).add(self.skip), self.len - self.skip) }
    }

    /// Whether a page of the window was past the end of the file when it was read (its bytes
    /// then read as zeros).
    pub(crate) fn lost_pages(&self) -> bool {
        TABLE[self.slot].hit.load(Ordering::Acquire)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        s.start.store(0, Ordering::Release);
        s.end.store(0, Ordering::Release);
        // SAFETY: our own mapping (with any zero pages the handler put into it).
        unsafe { libc::munmap(self.addr, self.len) };
        s.busy.store(false, Ordering::Release);
    }
}

// SAFETY: the pointer refers to a read-only mapping owned by the Window; nothing in it is
// thread-bound.
unsafe impl Send for Window {}
unsafe impl Sync for Window {}

/// Make our handler the installed one (chaining to the one found); false if it cannot be.
fn install() -> bool {
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: sigaction with a null new action only reads the current one.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut cur) } != 0 {
        return false;
    }
    if cur.sa_sigaction == on_sigbus as *const () as libc::sighandler_t {
        return true;
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    // SAFETY: our handler is not installed, so nothing reads PREVIOUS now (see Previous).
    unsafe { (*PREVIOUS.0.get()).write(cur) };
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
    ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: an empty mask; installing a handler that only uses async-signal-safe calls.
    unsafe {
        libc::sigemptyset(&mut ours.sa_mask);
        libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut()) == 0
    }
}

/// The SIGBUS handler: a fault in a registered window gets a zero page and is recorded;
/// anything else goes to the previous handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in &TABLE {
        let start = s.start.load(Ordering::Acquire);
        if start != 0 && start <= addr && addr < s.end.load(Ordering::Acquire) {
            let at = addr & !(page - 1);
            // SAFETY: replaces one page inside a mapping of ours by an anonymous zero page;
            // mmap is a plain system call, safe in a signal handler.
            let r = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                s.hit.store(true, Ordering::Release);
                return;
            }
            break;
        }
    }
    // not ours: what would have happened without us
    // SAFETY: PREVIOUS was written before our handler was installed (see Previous).
    let prev = unsafe { (*PREVIOUS.0.get()).assume_init_ref() };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: restoring the default action; the faulting access is retried on return and
        // the kernel then ends the process with SIGBUS, as without us.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
        }
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FOREIGN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    extern "C" fn foreign_handler(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY (test): what an application's handler might do: note the fault and map a zero page there
        let addr = unsafe { (*info).si_addr() } as usize & !4095;
        unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        FOREIGN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    #[test]
    fn a_fault_outside_our_mappings_goes_to_the_previous_handler() {
        use std::os::unix::io::AsRawFd;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, vec![1u8; 16384]).unwrap();
        unsafe {
            let mut h: libc::sigaction = std::mem::zeroed();
            h.sa_sigaction = foreign_handler as *const () as libc::sighandler_t;
            h.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut h.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGBUS, &h, std::ptr::null_mut()), 0);
        }
        // ours is installed on top of it when a window is made
        let f0 = std::fs::File::open(&p).unwrap();
        let w = window(&f0, 0, 16384).expect("mapped");
        assert_eq!(w.bytes(), &[1u8; 16384][..]);
        assert!(!w.lost_pages());
        drop(w);
        // an application's own mapping of a file that shrinks
        let f = std::fs::File::open(&p).unwrap();
        let addr =
            unsafe { libc::mmap(std::ptr::null_mut(), 16384, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
        assert_ne!(addr, libc::MAP_FAILED);
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(0).unwrap();
        let v = unsafe { std::ptr::read_volatile((addr as *const u8).add(8192)) };
        assert_eq!((v, FOREIGN.load(std::sync::atomic::Ordering::SeqCst)), (0, 1));
        unsafe { libc::munmap(addr, 16384) };
    }
}
