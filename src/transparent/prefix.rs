//! Which path arguments concern transparent mode.
//!
//! [`PrefixPaths::may_contain`] is the test every hooked call with a path takes first: it
//! compares raw bytes with the prefix (its spelled and its canonical form, on a component
//! boundary) and allocates nothing. A relative path is judged by its base directory (the
//! working directory or a directory descriptor's path), which the front end reads into a
//! stack buffer ([`BaseFn`]). Only a path that may be under the prefix is normalised (`.`,
//! `..`, repeated `/`) and made relative to it ([`PrefixPaths::relative`]). A path reaching
//! the prefix through some other symbolic link is not recognised: it goes to the file system.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::paths::Prefix;

/// Size of the buffer a base directory is read into.
pub const PATH_MAX: usize = 4096;

/// Reads the directory a relative path is taken against (`dirfd`: `AT_FDCWD` for the working
/// directory, else a directory descriptor) into `buf`; its length, or `None`.
pub type BaseFn = fn(dirfd: i32, buf: &mut [u8; PATH_MAX]) -> Option<usize>;

/// Bumped whenever the working directory may have changed or moved (a `chdir`/`fchdir`, a
/// rename or removal of a directory by this process, one another rank made, applied at a sync
/// point): a front end that keeps the working directory's path for [`BaseFn`] reads it again
/// when this differs from the generation it read it at. A rename of one of its ancestors by a
/// process outside the job is not seen (`getcwd` would name the moved directory; the kept path
/// still names the old place).
static CWD_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The working directory's generation ([`CWD_GENERATION`]).
#[inline]
pub fn cwd_generation() -> u64 {
    CWD_GENERATION.load(std::sync::atomic::Ordering::Acquire)
}

/// The working directory may have changed or moved: a kept path of it is stale.
pub fn cwd_may_have_moved() {
    CWD_GENERATION.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

/// The prefix directory ([`Prefix`]: as spelled in the configuration and with symbolic links
/// resolved), with the tests hooked calls make on path arguments.
#[derive(Debug, Clone)]
pub struct PrefixPaths {
    prefix: Prefix,
    /// Both forms are normal (not the root): [`PrefixPaths::relative`] may cut by bytes.
    byte_cut: bool,
}

impl From<Prefix> for PrefixPaths {
    fn from(prefix: Prefix) -> PrefixPaths {
        // both forms in normal form, the root aside ([`PrefixPaths::relative`]'s byte cut)
        let normal = |f: &Path| {
            let b = f.as_os_str().as_bytes();
            b.len() > 1 && b[0] == b'/' && b[b.len() - 1] != b'/' && !unusual(b)
        };
        let byte_cut = normal(&prefix.path) && normal(&prefix.canonical);
        PrefixPaths { prefix, byte_cut }
    }
}

fn below(path: &[u8], dir: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && (dir == b"/" || path[dir.len()] == b'/')
}

/// A component `.` or `..`, or an empty one (`//`): only normalisation can tell where the
/// path goes. Names that merely contain dots (`~/.cache`, `a..b`) are usual. One pass over the
/// bytes (a `stat` of a file in the prefix takes it at every call).
fn unusual(p: &[u8]) -> bool {
    // the current component's length and how many of its bytes are dots
    let (mut len, mut dots) = (0usize, 0usize);
    let mut after_slash = false;
    for &b in p {
        if b == b'/' {
            if after_slash || (len > 0 && len == dots && dots <= 2) {
                return true;
            }
            (len, dots, after_slash) = (0, 0, true);
        } else {
            len += 1;
            dots += usize::from(b == b'.');
            after_slash = false;
        }
    }
    len > 0 && len == dots && dots <= 2
}

/// `path` taken against directory `base` (ignored when `path` is absolute; a relative `base`
/// is read from the root) in normal form, by its bytes: absolute, without empty, `.` or `..`
/// components (`..` at the root stays there) and without a `/` at the end; what
/// [`crate::paths::normalize`] gives, in one buffer.
fn normal_bytes(base: &[u8], path: &[u8]) -> Vec<u8> {
    // (a `/` before the base, which may be relative, and one between base and path)
    let mut out = Vec::with_capacity(base.len() + path.len() + 2);
    out.push(b'/');
    let base = if path.first() == Some(&b'/') { &[][..] } else { base };
    for c in base.split(|&b| b == b'/').chain(path.split(|&b| b == b'/')) {
        match c {
            b"" | b"." => {}
            b".." => {
                // (the last `/`, kept when it is the root's)
                let at = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(at.max(1));
            }
            name => {
                if out.len() > 1 {
                    out.push(b'/');
                }
                out.extend_from_slice(name);
            }
        }
    }
    out
}

impl PrefixPaths {
    /// The prefix as the configuration spells it (the form paths are reported in).
    pub fn path(&self) -> &Path {
        &self.prefix.path
    }

    /// The prefix with symbolic links resolved.
    pub fn canonical(&self) -> &Path {
        &self.prefix.canonical
    }

    fn forms(&self) -> [&[u8]; 2] {
        [self.path().as_os_str().as_bytes(), self.canonical().as_os_str().as_bytes()]
    }

    /// Fast check: may `path` (taken against `base` when relative) name the prefix or
    /// something below it? False positives are allowed, false negatives are not.
    pub fn may_contain(&self, path: &[u8], base: Option<&[u8]>) -> bool {
        if path.is_empty() {
            return false;
        }
        let forms = self.forms();
        if path[0] == b'/' {
            return forms.iter().any(|f| below(path, f) || path == *f) || unusual(path);
        }
        let Some(b) = base else { return false };
        // below the prefix, the prefix itself, or above it (`a/../../prefix/x`)
        forms.iter().any(|f| below(b, f) || b == *f || below(f, b)) || unusual(path)
    }

    /// `path` (taken against `base` when relative) normalised and made relative to the
    /// prefix: `Some("")` for the prefix itself, `None` outside it.
    pub fn relative(&self, path: &[u8], base: Option<&[u8]>) -> Option<PathBuf> {
        // an absolute path in normal form already (no empty, `.` or `..` component, no `/` at
        // the end: most arguments) that names the prefix or a path below it by its bytes is
        // cut there, without normalising it again (a stat of a file in the prefix per time
        // step, OpenFOAM's, costs less); anything else is normalised first, by its bytes into
        // one buffer (QE's `./out/si.EXIT`, twice per iteration, costs less too)
        let absolute = path.first() == Some(&b'/');
        if self.byte_cut && absolute && path.last() != Some(&b'/') && !unusual(path) {
            return self.cut_at(path).map(|at| PathBuf::from(OsStr::from_bytes(&path[at..])));
        }
        let mut abs = normal_bytes(if absolute { b"/" } else { base? }, path);
        if self.byte_cut {
            // (the buffer becomes the relative path)
            abs.drain(..self.cut_at(&abs)?);
            return Some(PathBuf::from(std::ffi::OsString::from_vec(abs)));
        }
        let abs = Path::new(OsStr::from_bytes(&abs));
        [self.path(), self.canonical()].iter().find_map(|f| abs.strip_prefix(f).ok().map(Path::to_path_buf))
    }

    /// Where normal absolute path `abs` becomes relative to the prefix, by its bytes (both
    /// forms normal: `byte_cut`): its length for the prefix itself, `None` outside it.
    fn cut_at(&self, abs: &[u8]) -> Option<usize> {
        self.forms().into_iter().find_map(
            |f| {
                if abs == f {
                    Some(abs.len())
                } else {
                    below(abs, f).then_some(f.len() + 1)
                }
            },
        )
    }

    /// The application's path of `rel` (the prefix itself for `""`, without a trailing `/`).
    pub fn join(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.prefix.path.clone()
        } else {
            self.prefix.join(rel)
        }
    }
}

/// Whether `rel` (relative to the prefix) is SCR's own: the `.scr` directory or something
/// inside it, or the staging name of a shared file (`.<name>.scrshared`, see
/// [`super::shared`]) or a file the MPI library makes beside one (a lock file that starts
/// with it). Such paths always reach the prefix.
pub fn reserved(rel: &Path) -> bool {
    // by the bytes of a relative path in normal form (what `relative` gives): its last
    // component
    let b = rel.as_os_str().as_bytes();
    let b = b.strip_suffix(b"/").unwrap_or(b);
    let name = b.rsplit(|&c| c == b'/').next().unwrap_or(b);
    let staging = crate::paths::STAGING_SUFFIX.as_bytes();
    crate::paths::in_scr_dir(rel) || (name.first() == Some(&b'.') && name.windows(staging.len()).any(|w| w == staging))
}

/// Whether normalised relative path `p` is strictly below `dir` (`""`: the prefix itself).
pub(super) fn under(p: &Path, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (p.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    if d.is_empty() {
        return !p.is_empty();
    }
    p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> PrefixPaths {
        PrefixPaths::from(Prefix { path: "/run/job".into(), canonical: "/lustre/u/job".into() })
    }

    #[test]
    fn absolute_paths_are_judged_on_a_component_boundary() {
        let p = p();
        assert!(p.may_contain(b"/run/job/ckpt.1/a", None));
        assert!(p.may_contain(b"/lustre/u/job/ckpt.1/a", None));
        assert!(p.may_contain(b"/run/job", None));
        assert!(!p.may_contain(b"/run/jobfoo/a", None), "a sibling with a longer name");
        assert!(!p.may_contain(b"/tmp/a", None));
        assert!(!p.may_contain(b"", None));
        assert!(p.may_contain(b"/tmp/../run/job/a", None), "unusual paths are normalised");
        assert_eq!(p.relative(b"/tmp/../run/job/./ckpt.1//a", None), Some(PathBuf::from("ckpt.1/a")));
        assert_eq!(p.relative(b"/lustre/u/job/ckpt.1/a", None), Some(PathBuf::from("ckpt.1/a")));
        assert_eq!(p.relative(b"/run/job", None), Some(PathBuf::new()));
        assert_eq!(p.relative(b"/run/jobfoo/a", None), None);
    }

    #[test]
    fn the_byte_cut_of_a_normal_path_is_what_normalising_gives() {
        let slow = |p: &PrefixPaths, path: &[u8]| {
            let abs = crate::paths::normalize(Path::new(OsStr::from_bytes(path)), Path::new("/"));
            [p.path(), p.canonical()].iter().find_map(|f| abs.strip_prefix(f).ok().map(Path::to_path_buf))
        };
        let root = PrefixPaths::from(Prefix { path: "/".into(), canonical: "/".into() });
        // forms `Prefix::new` does not make: no byte cut
        let odd = PrefixPaths::from(Prefix { path: "/run/job/".into(), canonical: "/run//job".into() });
        let mixed = PrefixPaths::from(Prefix { path: "/".into(), canonical: "/lustre/u/job".into() });
        for p in [p(), root, odd, mixed] {
            for path in [
                &b"/run/job"[..],
                b"/run/job/",
                b"/run/job/system/controlDict",
                b"/run/job/processor0/0.1/U",
                b"/run/job/dir/",
                b"/run/jobfoo/a",
                b"/run/jo",
                b"/run",
                b"/",
                b"/lustre/u/job/ckpt.1/a",
                b"/lustre/u/job",
                b"/lustre/u/jobs/x",
                b"/tmp/a",
                b"/run/job/.hidden/x.",
            ] {
                let show = String::from_utf8_lossy(path);
                assert_eq!(p.relative(path, None), slow(&p, path), "{show} below {}", p.path().display());
            }
        }
    }

    #[test]
    fn the_one_pass_test_agrees_with_the_definition_on_every_short_path() {
        let defined =
            |p: &[u8]| p.windows(2).any(|w| w == b"//") || p.split(|b| *b == b'/').any(|c| c == b"." || c == b"..");
        // every path of up to 8 bytes over `a`, `.` and `/`
        let mut paths: Vec<Vec<u8>> = vec![Vec::new()];
        let mut checked = 0;
        for _ in 0..8 {
            let mut longer = Vec::new();
            for p in &paths {
                for b in [b'a', b'.', b'/'] {
                    let mut q = p.clone();
                    q.push(b);
                    assert_eq!(unusual(&q), defined(&q), "{}", String::from_utf8_lossy(&q));
                    checked += 1;
                    longer.push(q);
                }
            }
            paths = longer;
        }
        assert_eq!(checked, (1..=8).map(|n| 3usize.pow(n)).sum::<usize>());
        assert!(!unusual(b""));
    }

    /// Every string of up to `n` of `tokens`, concatenated.
    fn strings(tokens: &[&[u8]], n: usize) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        let mut last = all.clone();
        for _ in 0..n {
            last = last.iter().flat_map(|p| tokens.iter().map(move |t| [&p[..], t].concat())).collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn normalising_by_bytes_is_what_normalising_by_components_gives() {
        // what `relative` did before it normalised by bytes: components, then strip_prefix
        let by_components = |p: &PrefixPaths, path: &[u8], base: Option<&[u8]>| {
            let path = Path::new(OsStr::from_bytes(path));
            let abs = if path.is_absolute() {
                crate::paths::normalize(path, Path::new("/"))
            } else {
                crate::paths::normalize(path, Path::new(OsStr::from_bytes(base?)))
            };
            [p.path(), p.canonical()].iter().find_map(|f| abs.strip_prefix(f).ok().map(Path::to_path_buf))
        };
        let root = PrefixPaths::from(Prefix { path: "/".into(), canonical: "/".into() });
        let odd = PrefixPaths::from(Prefix { path: "/run/job/".into(), canonical: "/run//job".into() });
        let mixed = PrefixPaths::from(Prefix { path: "/".into(), canonical: "/lustre/u/job".into() });
        let bases: [Option<&[u8]>; 7] = [
            None,
            Some(b"/"),
            Some(b"/run"),
            Some(b"/run/job"),
            Some(b"/run/job/a"),
            Some(b"/lustre/u"),
            Some(b"pipe:[7]"),
        ];
        // every string of up to 6 of these: relative and absolute, with `.`, `..`, `//`, a `/`
        // at the end, the prefix's own components and names that only start like them
        let paths = strings(&[b"/", b".", b"job", b"run", b"a", b"jo"], 6);
        let mut checked = 0;
        for p in [p(), root, odd, mixed] {
            for base in bases {
                for path in &paths {
                    let (show, b) = (String::from_utf8_lossy(path), base.map(String::from_utf8_lossy));
                    assert_eq!(
                        p.relative(path, base),
                        by_components(&p, path, base),
                        "{show} from {b:?} below {:?}",
                        p.path()
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 4 * 7 * (1..=6).map(|n| 6usize.pow(n)).sum::<usize>() + 4 * 7);
    }

    #[test]
    fn reserved_by_bytes_is_what_reserved_by_components_was() {
        let by_components = |rel: &Path| {
            let staging = crate::paths::STAGING_SUFFIX.as_bytes();
            let staging = rel.file_name().is_some_and(|n| {
                let n = n.as_bytes();
                n.first() == Some(&b'.') && n.windows(staging.len()).any(|w| w == staging)
            });
            staging || rel.components().next().is_some_and(|c| c.as_os_str() == crate::paths::SCR_DIR)
        };
        // every relative path of up to 4 of these without `.`, `..` or empty components (the
        // paths `relative` gives, and with a `/` at the end)
        let paths = strings(&[b"/", b".scr", b"a", b".x.scrshared", b".scrshared", b"x.scrshared.lock", b".scrs"], 4);
        let mut checked = 0;
        for path in paths.iter().filter(|p| p.first() != Some(&b'/') && !unusual(p)) {
            let rel = Path::new(OsStr::from_bytes(path));
            assert_eq!(reserved(rel), by_components(rel), "{}", rel.display());
            checked += 1;
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn only_dot_components_and_empty_ones_are_unusual() {
        let p = p();
        // dot files and names with dots outside the prefix keep the fast path
        for usual in
            [&b"/data/u/.cache/x"[..], b"/data/u/.local/share/f", b"/scratch/a..b", b"/scratch/x.", b"/scratch/.../y"]
        {
            assert!(!unusual(usual), "{}", String::from_utf8_lossy(usual));
            assert!(!p.may_contain(usual, None), "{}", String::from_utf8_lossy(usual));
        }
        assert!(!p.may_contain(b".cache/x", Some(b"/data/u")));
        assert!(!p.may_contain(b"a..b/x", Some(b"/data/u")));
        // `.`, `..` and `//` anywhere take the slow path, which normalises them
        for (path, want) in [
            (&b"/run/job/./ckpt"[..], Some("ckpt")),
            (b"/run/job/../x", None),
            (b"/run/job//x", Some("x")),
            (b"/scratch/../run/job/x", Some("x")),
            (b"/scratch//../run/job/x", Some("x")),
            (b"/run/./job/x", Some("x")),
            (b"/scratch/.", None),
            (b"/scratch/..", None),
        ] {
            assert!(unusual(path), "{}", String::from_utf8_lossy(path));
            assert!(p.may_contain(path, None), "{}", String::from_utf8_lossy(path));
            assert_eq!(p.relative(path, None), want.map(PathBuf::from), "{}", String::from_utf8_lossy(path));
        }
        assert!(p.may_contain(b"./../run/job/x", Some(b"/data")));
        assert_eq!(p.relative(b"./../../run/job/x", Some(b"/data/u")), Some(PathBuf::from("x")));
    }

    #[test]
    fn relative_paths_are_judged_by_their_base() {
        let p = p();
        assert!(p.may_contain(b"ckpt.1/a", Some(b"/run/job")));
        assert!(p.may_contain(b"a", Some(b"/run/job/ckpt.1")));
        assert!(p.may_contain(b"job/a", Some(b"/run")), "a base above the prefix");
        assert!(p.may_contain(b"job/a", Some(b"/")));
        assert!(!p.may_contain(b"a", Some(b"/home/u")));
        assert!(p.may_contain(b"../run/job/a", Some(b"/home")), "`..` may lead anywhere");
        assert!(!p.may_contain(b"a", None), "no base: the front end could not read it");
        assert_eq!(p.relative(b"a", Some(b"/run/job/ckpt.1")), Some(PathBuf::from("ckpt.1/a")));
        assert_eq!(p.relative(b"../x", Some(b"/run/job")), None);
    }

    #[test]
    fn scr_directory_and_staging_names_are_reserved() {
        assert!(reserved(Path::new(".scr/index.scr")));
        assert!(reserved(Path::new(".scr")));
        assert!(!reserved(Path::new("ckpt.1/.scr")));
        assert!(!reserved(Path::new("")));
        assert!(reserved(Path::new("ckpt.1/.shared.dat.scrshared")));
        assert!(reserved(Path::new("ckpt.1/.shared.dat.scrshared-1-2.lock")));
        assert!(!reserved(Path::new("ckpt.1/shared.dat.scrshared")), "not a dot file: the application's");
        assert!(!reserved(Path::new("ckpt.1/.hidden")));
    }
}
