//! Which file descriptors write pending files: a lock-free table indexed by descriptor (one
//! atomic per descriptor below 65536, a locked map above), so `close`, `dup` and failed
//! writes of the application's other descriptors cost one atomic load. The table holds ids;
//! what an id stands for is [`Tracked`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// What a tracked descriptor writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracked {
    /// A pending file of this rank (its id in the table).
    Pending(u32),
    /// A file several ranks write (its id in [`super::shared`]'s list).
    Shared(u32),
}

/// Ids of shared files carry this bit (pending files' ids do not): one id space for both.
pub(super) const SHARED_BIT: u32 = 1 << 31;

impl Tracked {
    /// The file an id of the descriptor table stands for (0: none).
    pub fn of(id: u32) -> Option<Tracked> {
        match id {
            0 => None,
            id if id & SHARED_BIT != 0 => Some(Tracked::Shared(id)),
            id => Some(Tracked::Pending(id)),
        }
    }
}

const SLOTS: usize = 1 << 16;
static FDS: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
static OVERFLOW: Mutex<Option<HashMap<i32, u32>>> = Mutex::new(None);
/// Descriptors tracked now: while none is, every lookup is one load.
static TRACKED: AtomicUsize = AtomicUsize::new(0);

/// Account for a slot that held `old` and now holds `new`.
fn count(old: u32, new: u32) {
    match (old == 0, new == 0) {
        (true, false) => {
            TRACKED.fetch_add(1, Ordering::SeqCst);
        }
        (false, true) => {
            TRACKED.fetch_sub(1, Ordering::SeqCst);
        }
        _ => {}
    }
}

fn overflow() -> std::sync::MutexGuard<'static, Option<HashMap<i32, u32>>> {
    OVERFLOW.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether any descriptor is tracked now.
#[inline]
pub fn any() -> bool {
    TRACKED.load(Ordering::Relaxed) != 0
}

/// The pending file `fd` writes (its id), or 0.
#[inline]
pub fn get(fd: i32) -> u32 {
    if !any() || fd < 0 {
        return 0;
    }
    match FDS.get(fd as usize) {
        Some(s) => s.load(Ordering::Acquire),
        None => overflow().as_ref().and_then(|m| m.get(&fd).copied()).unwrap_or(0),
    }
}

/// `fd` now writes pending file `id` (0: nothing).
pub fn set(fd: i32, id: u32) {
    if fd < 0 {
        return;
    }
    let old = match FDS.get(fd as usize) {
        Some(s) => s.swap(id, Ordering::AcqRel),
        None => {
            let mut m = overflow();
            let m = m.get_or_insert_with(HashMap::new);
            if id == 0 { m.remove(&fd) } else { m.insert(fd, id) }.unwrap_or(0)
        }
    };
    count(old, id);
}

/// Forget every tracked descriptor from `first` to `last` (`close_range`): their
/// (descriptor, id) pairs. One load when nothing is tracked.
pub fn take_range(first: u32, last: u32) -> Vec<(i32, u32)> {
    let mut out = Vec::new();
    if !any() || first > last {
        return out;
    }
    let low_end = (last as usize).min(SLOTS - 1);
    for (fd, slot) in FDS.iter().enumerate().take(low_end + 1).skip(first as usize) {
        if slot.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let id = slot.swap(0, Ordering::AcqRel);
        if id != 0 {
            count(id, 0);
            out.push((fd as i32, id));
        }
    }
    if last as usize >= SLOTS {
        let mut g = overflow();
        if let Some(m) = g.as_mut() {
            let inside = |fd: i32| fd as u32 >= first && fd as u32 <= last;
            let mut high: Vec<(i32, u32)> =
                m.iter().filter(|(fd, _)| inside(**fd)).map(|(fd, id)| (*fd, *id)).collect();
            high.sort_unstable();
            for (fd, id) in high {
                m.remove(&fd);
                count(id, 0);
                out.push((fd, id));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // one test: the table is process-wide
    #[test]
    fn descriptors_low_and_high_and_ranges() {
        for fd in [3, 70_000] {
            assert_eq!(get(fd), 0);
            set(fd, 7);
            assert_eq!(get(fd), 7);
            set(fd, 0);
            assert_eq!(get(fd), 0);
        }
        assert_eq!(get(-1), 0);
        assert_eq!(TRACKED.load(Ordering::SeqCst), 0);
        assert!(take_range(0, u32::MAX).is_empty());

        for (fd, id) in [(5, 1), (9, 2), (65_535, 3), (65_536, 4), (70_000, 5), (2_000_000, 6)] {
            set(fd, id);
        }
        set(9, 8); // replaced: still one descriptor
        assert_eq!(TRACKED.load(Ordering::SeqCst), 6);
        assert_eq!(take_range(6, 65_535), vec![(9, 8), (65_535, 3)]);
        assert_eq!((get(5), get(9), get(65_535), get(65_536)), (1, 0, 0, 4));
        // every tracked descriptor in the range, however high (close_range(3, ~0U, 0))
        assert_eq!(take_range(3, u32::MAX), vec![(5, 1), (65_536, 4), (70_000, 5), (2_000_000, 6)]);
        assert_eq!((get(65_536), get(70_000), get(2_000_000)), (0, 0, 0));
        assert_eq!(TRACKED.load(Ordering::SeqCst), 0);
        assert!(take_range(7, 3).is_empty());
    }
}
