//! Which file descriptors write pending files: a lock-free table indexed by descriptor (one
//! atomic per descriptor below 65536, a locked map above), so `close`, `dup` and failed
//! writes of the application's other descriptors cost one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

const SLOTS: usize = 1 << 16;
static FDS: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
static OVERFLOW: Mutex<Option<HashMap<i32, u32>>> = Mutex::new(None);
/// Set once a descriptor was ever tracked: until then every lookup is one load.
static ANY: AtomicBool = AtomicBool::new(false);

/// The pending file `fd` writes (its id), or 0.
#[inline]
pub fn get(fd: i32) -> u32 {
    if !ANY.load(Ordering::Relaxed) || fd < 0 {
        return 0;
    }
    match FDS.get(fd as usize) {
        Some(s) => s.load(Ordering::Acquire),
        None => OVERFLOW.lock().ok().and_then(|m| m.as_ref().and_then(|m| m.get(&fd).copied())).unwrap_or(0),
    }
}

/// `fd` now writes pending file `id` (0: nothing).
pub fn set(fd: i32, id: u32) {
    if fd < 0 {
        return;
    }
    if id != 0 {
        ANY.store(true, Ordering::Relaxed);
    }
    match FDS.get(fd as usize) {
        Some(s) => s.store(id, Ordering::Release),
        None => {
            if let Ok(mut m) = OVERFLOW.lock() {
                let m = m.get_or_insert_with(HashMap::new);
                if id == 0 {
                    m.remove(&fd);
                } else {
                    m.insert(fd, id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn descriptors_low_and_high() {
        for fd in [3, 70_000] {
            assert_eq!(super::get(fd), 0);
            super::set(fd, 7);
            assert_eq!(super::get(fd), 7);
            super::set(fd, 0);
            assert_eq!(super::get(fd), 0);
        }
        assert_eq!(super::get(-1), 0);
    }
}
