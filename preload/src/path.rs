//! Deciding whether a path argument concerns the prefix, fast.
//!
//! [`under_prefix`] is the fast path every hooked call takes: no allocation, no lock. An
//! absolute path is compared byte by byte with the prefix (spelled and canonical form, on a
//! component boundary); a relative one costs a `getcwd` (or, for `*at` calls with a directory
//! descriptor, a `readlink` of `/proc/self/fd/N`) into a stack buffer. Only when a path may
//! be under the prefix is it normalised (`.`, `..`, repeated `/`) into a `PathBuf` and made
//! relative to the prefix ([`resolve`]). A path that reaches the prefix through some other
//! symbolic link is not recognised: it passes through to the file system.

use std::ffi::{c_char, c_int, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::state::Active;

/// A path under the prefix: absolute (normalised) and relative to the prefix.
pub struct Resolved {
    pub abs: PathBuf,
    pub rel: String,
}

fn starts_with_dir(path: &[u8], dir: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

fn suspicious(p: &[u8]) -> bool {
    p.windows(2).any(|w| w == b"//" || w == b"/.")
}

/// The base a relative path is taken against, into `buf`: the cwd or the directory of `dirfd`.
fn base(dirfd: c_int, buf: &mut [u8; 4096]) -> Option<&[u8]> {
    if dirfd == libc::AT_FDCWD {
        // SAFETY: buf is writable for its length.
        let p = unsafe { libc::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
        if p.is_null() {
            return None;
        }
        let n = buf.iter().position(|&b| b == 0)?;
        Some(&buf[..n])
    } else {
        let mut link = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
        let mut n = 14;
        let mut digits = [0u8; 11];
        let mut k = 0;
        let mut v = dirfd as u32;
        loop {
            digits[k] = b'0' + (v % 10) as u8;
            k += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        while k > 0 {
            k -= 1;
            link[n] = digits[k];
            n += 1;
        }
        // SAFETY: link is NUL-terminated (zero-filled), buf writable.
        let r = unsafe { libc::readlink(link.as_ptr() as *const c_char, buf.as_mut_ptr() as *mut c_char, buf.len()) };
        if r <= 0 || r as usize >= buf.len() {
            return None;
        }
        Some(&buf[..r as usize])
    }
}

/// Fast check: may `path` (relative to `dirfd`) name something below the prefix?
pub fn under_prefix(a: &Active, dirfd: c_int, path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    // SAFETY: the caller passes the application's NUL-terminated path argument.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if p.is_empty() {
        return false;
    }
    let forms = [a.prefix.as_os_str().as_bytes(), a.canonical.as_os_str().as_bytes()];
    if p[0] == b'/' {
        return forms.iter().any(|f| starts_with_dir(p, f)) || suspicious(p);
    }
    let mut buf = [0u8; 4096];
    let Some(b) = base(dirfd, &mut buf) else { return false };
    forms.iter().any(|f| starts_with_dir(b, f) || b == *f || starts_with_dir(f, b) || b == b"/")
        || p.windows(2).any(|w| w == b"..")
}

/// Normalise `path` (relative to `dirfd`) and make it relative to the prefix. `None` if it
/// is not below the prefix, is the prefix itself, or lies in the prefix's `.scr` directory.
pub fn resolve(a: &Active, dirfd: c_int, path: *const c_char) -> Option<Resolved> {
    if !under_prefix(a, dirfd, path) || !crate::state::is_owner(a) {
        return None;
    }
    let abs = absolute(dirfd, path)?;
    for form in [&a.prefix, &a.canonical] {
        if let Ok(rel) = abs.strip_prefix(form) {
            let rel = rel.to_str()?;
            if rel.is_empty() || rel == ".scr" || rel.starts_with(".scr/") {
                return None;
            }
            let rel = rel.to_string();
            // report the spelled form, so both spellings share one table entry
            return Some(Resolved { abs: a.prefix.join(&rel), rel });
        }
    }
    None
}

/// The absolute (normalised) form of `path` relative to `dirfd`, for any path.
pub fn absolute(dirfd: c_int, path: *const c_char) -> Option<PathBuf> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the application's NUL-terminated argument.
    let p = Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
    if p.is_absolute() {
        return Some(scr::paths::normalize(p, Path::new("/")));
    }
    let mut buf = [0u8; 4096];
    let b = base(dirfd, &mut buf)?;
    Some(scr::paths::normalize(p, Path::new(OsStr::from_bytes(b))))
}
