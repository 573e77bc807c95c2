//! The real functions behind the hooks, found with `dlsym(RTLD_NEXT)` on first use and
//! cached in an atomic (no lock, no panic). MPI symbols fall back to the `libmpi` already
//! loaded when it is not reachable through `RTLD_NEXT` (mpi4py loads it `RTLD_LOCAL`).
//! A symbol that cannot be found makes the call fail with `ENOSYS` instead of aborting.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Resolve `name` (NUL-terminated) into `slot`; 0 if it cannot be found.
pub fn resolve(slot: &AtomicUsize, name: &[u8]) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
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

/// Declare `real::<name>()` returning the next definition as a typed function pointer.
macro_rules! real_fns {
    ($( $name:ident : fn($($arg:ty),* $(; $va:tt)?) -> $ret:ty ;)*) => {
        $(
            #[allow(non_snake_case, dead_code)]
            pub fn $name() -> Option<unsafe extern "C" fn($($arg),* $(, $va)?) -> $ret> {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: the symbol has this C signature (glibc / MPI headers).
                (p != 0).then(|| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),* $(, $va)?) -> $ret>(p) })
            }
        )*
    };
}

use libc::{c_int, c_uint, mode_t, size_t, ssize_t, FILE};

/// `scandir`'s filter and comparison functions (`dirent` and `dirent64` have one layout on
/// the 64-bit Linux ABIs this library supports).
pub type Filter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
pub type Compar = Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;
/// `nftw`'s callback: path, stat buffer, type flag, `struct FTW { int base; int level; }`.
pub type NftwFn = Option<unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut [c_int; 2]) -> c_int>;
use mpi::ffi::{MPI_Comm, MPI_Datatype, MPI_Op};

real_fns! {
    open: fn(*const c_char, c_int; ...) -> c_int;
    open64: fn(*const c_char, c_int; ...) -> c_int;
    openat: fn(c_int, *const c_char, c_int; ...) -> c_int;
    openat64: fn(c_int, *const c_char, c_int; ...) -> c_int;
    creat: fn(*const c_char, mode_t) -> c_int;
    creat64: fn(*const c_char, mode_t) -> c_int;
    __open_2: fn(*const c_char, c_int) -> c_int;
    __open64_2: fn(*const c_char, c_int) -> c_int;
    __openat_2: fn(c_int, *const c_char, c_int) -> c_int;
    __openat64_2: fn(c_int, *const c_char, c_int) -> c_int;
    fopen: fn(*const c_char, *const c_char) -> *mut FILE;
    fopen64: fn(*const c_char, *const c_char) -> *mut FILE;
    freopen: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    freopen64: fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    fclose: fn(*mut FILE) -> c_int;
    close: fn(c_int) -> c_int;
    close_range: fn(c_uint, c_uint, c_int) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    fcntl: fn(c_int, c_int; ...) -> c_int;
    fcntl64: fn(c_int, c_int; ...) -> c_int;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    pwrite: fn(c_int, *const c_void, size_t, libc::off_t) -> ssize_t;
    pwrite64: fn(c_int, *const c_void, size_t, libc::off64_t) -> ssize_t;
    writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    rename: fn(*const c_char, *const c_char) -> c_int;
    renameat: fn(c_int, *const c_char, c_int, *const c_char) -> c_int;
    renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int;
    unlink: fn(*const c_char) -> c_int;
    unlinkat: fn(c_int, *const c_char, c_int) -> c_int;
    remove: fn(*const c_char) -> c_int;
    access: fn(*const c_char, c_int) -> c_int;
    faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int;
    stat: fn(*const c_char, *mut libc::stat) -> c_int;
    stat64: fn(*const c_char, *mut libc::stat64) -> c_int;
    lstat: fn(*const c_char, *mut libc::stat) -> c_int;
    lstat64: fn(*const c_char, *mut libc::stat64) -> c_int;
    fstatat: fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
    fstatat64: fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
    __xstat: fn(c_int, *const c_char, *mut libc::stat) -> c_int;
    __xstat64: fn(c_int, *const c_char, *mut libc::stat64) -> c_int;
    __lxstat: fn(c_int, *const c_char, *mut libc::stat) -> c_int;
    __lxstat64: fn(c_int, *const c_char, *mut libc::stat64) -> c_int;
    __fxstatat: fn(c_int, c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
    __fxstatat64: fn(c_int, c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
    statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
    rmdir: fn(*const c_char) -> c_int;
    link: fn(*const c_char, *const c_char) -> c_int;
    linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int;
    truncate: fn(*const c_char, libc::off_t) -> c_int;
    truncate64: fn(*const c_char, libc::off64_t) -> c_int;
    chmod: fn(*const c_char, mode_t) -> c_int;
    fchmodat: fn(c_int, *const c_char, mode_t, c_int) -> c_int;
    chown: fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int;
    lchown: fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int;
    fchownat: fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int;
    utime: fn(*const c_char, *const libc::utimbuf) -> c_int;
    utimes: fn(*const c_char, *const libc::timeval) -> c_int;
    lutimes: fn(*const c_char, *const libc::timeval) -> c_int;
    futimesat: fn(c_int, *const c_char, *const libc::timeval) -> c_int;
    utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int;
    readlink: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t;
    realpath: fn(*const c_char, *mut c_char) -> *mut c_char;
    __realpath_chk: fn(*const c_char, *mut c_char, size_t) -> *mut c_char;
    canonicalize_file_name: fn(*const c_char) -> *mut c_char;
    statfs: fn(*const c_char, *mut libc::statfs) -> c_int;
    statfs64: fn(*const c_char, *mut libc::statfs64) -> c_int;
    statvfs: fn(*const c_char, *mut libc::statvfs) -> c_int;
    statvfs64: fn(*const c_char, *mut libc::statvfs64) -> c_int;
    opendir: fn(*const c_char) -> *mut libc::DIR;
    fdopendir: fn(c_int) -> *mut libc::DIR;
    readdir: fn(*mut libc::DIR) -> *mut libc::dirent;
    readdir64: fn(*mut libc::DIR) -> *mut libc::dirent64;
    rewinddir: fn(*mut libc::DIR) -> ();
    closedir: fn(*mut libc::DIR) -> c_int;
    scandir: fn(*const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int;
    scandir64: fn(*const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int;
    scandirat: fn(c_int, *const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int;
    scandirat64: fn(c_int, *const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int;
    nftw: fn(*const c_char, NftwFn, c_int, c_int) -> c_int;
    nftw64: fn(*const c_char, NftwFn, c_int, c_int) -> c_int;
    PMPI_Init: fn(*mut c_int, *mut *mut *mut c_char) -> c_int;
    PMPI_Init_thread: fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
    PMPI_Finalize: fn() -> c_int;
    PMPI_Barrier: fn(MPI_Comm) -> c_int;
    PMPI_Allreduce: fn(*const c_void, *mut c_void, c_int, MPI_Datatype, MPI_Op, MPI_Comm) -> c_int;
}
