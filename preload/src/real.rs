//! The real functions behind the hooks, found with `dlsym(RTLD_NEXT)` on first use (`mmap`'s
//! at load time, [`find_mmap`]) and cached in an atomic (no lock, no panic). MPI symbols fall
//! back to the `libmpi` already loaded when it is not reachable through `RTLD_NEXT` (mpi4py
//! loads it `RTLD_LOCAL`).
//! A symbol that cannot be found makes the call fail with `ENOSYS` instead of aborting.

use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Resolve `name` (NUL-terminated) into `slot`; 0 if it cannot be found. (Inlined into every
/// hook: after the first call, one load.)
#[inline]
pub fn resolve(slot: &AtomicUsize, name: &[u8]) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    resolve_first(slot, name)
}

/// [`resolve`]'s first call for `slot`.
#[cold]
#[inline(never)]
fn resolve_first(slot: &AtomicUsize, name: &[u8]) -> usize {
    let sym = name.as_ptr() as *const c_char;
    // SAFETY: `name` is a NUL-terminated literal; dlsym/dlopen take C strings.
    let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, sym) };
    if p.is_null() && (name.starts_with(b"MPI_") || name.starts_with(b"PMPI_")) {
        for lib in [&b"libmpi.so.40\0"[..], b"libmpi.so.12\0", b"libmpi.so\0"] {
            // SAFETY: RTLD_NOLOAD only returns a handle to a library already loaded.
            let h = unsafe { libc::dlopen(lib.as_ptr() as *const c_char, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
            if !h.is_null() {
                // SAFETY: valid handle and C string.
                p = unsafe { libc::dlsym(h, sym) };
                if !p.is_null() {
                    break;
                }
            }
        }
    }
    let v = p as usize;
    slot.store(v, Ordering::Relaxed);
    v
}

type MmapFn =
    unsafe extern "C" fn(*mut libc::c_void, libc::size_t, c_int, c_int, c_int, libc::off64_t) -> *mut libc::c_void;

// the raw system call below takes its six arguments in registers: 64-bit ABIs only
const _: () = assert!(cfg!(target_pointer_width = "64"), "mmap's fallback is the 64-bit system call");

/// The next `mmap` and `mmap64`, looked up once by the constructor ([`find_mmap`]), never from
/// inside the hook: `dlsym` may allocate (glibc before 2.34 allocates a thread's error
/// buffer), and an allocator maps its memory while it holds its own lock (jemalloc#329,
/// darshan#223).
static MMAP: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Look up the next `mmap` and `mmap64` (the constructor, once).
pub fn find_mmap() {
    resolve(&MMAP[0], b"mmap\0");
    resolve(&MMAP[1], b"mmap64\0");
}

/// The next `mmap` (`which` 0) or `mmap64` (1), called with the application's arguments; the
/// kernel's until the constructor has found it (an allocator initialised before this library),
/// or when there is none.
///
/// # Safety
/// `mmap`'s contract.
pub unsafe fn mmap(
    which: usize,
    args: (*mut libc::c_void, libc::size_t, c_int, c_int, c_int, libc::off64_t),
) -> *mut libc::c_void {
    let (addr, len, prot, flags, fd, off) = args;
    match MMAP[which].load(Ordering::Relaxed) {
        // SAFETY: mmap's contract, to the kernel.
        0 => unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut libc::c_void },
        // SAFETY: the symbol has mmap's C signature (glibc), called with the application's arguments.
        p => unsafe { std::mem::transmute::<usize, MmapFn>(p)(addr, len, prot, flags, fd, off) },
    }
}

/// The next definition of `name` as a function of the given C signature (resolved once per
/// call site into a static), or: set `ENOSYS` and return `fail` from the calling hook.
macro_rules! next_or {
    ($name:ident: fn($($t:ty),* $(; $va:tt)?) -> $ret:ty, $fail:expr) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        match $crate::real::resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes()) {
            0 => {
                $crate::detour::set_errno(libc::ENOSYS);
                return $fail;
            }
            // SAFETY: the symbol has this C signature (glibc and MPI headers).
            p => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),* $(, $va)?) -> $ret>(p) },
        }
    }};
}
pub(crate) use next_or;

use libc::c_int;

/// `scandir`'s filter and comparison functions (`dirent` and `dirent64` have one layout on
/// the 64-bit Linux ABIs this library supports).
pub type Filter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
pub type Compar = Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;
/// `nftw`'s callback: path, stat buffer, type flag, `struct FTW { int base; int level; }`.
pub type NftwFn = Option<unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut [c_int; 2]) -> c_int>;
