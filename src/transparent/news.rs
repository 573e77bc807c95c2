//! Whether this rank has news for the others: its file table or its shared files changed
//! since the last sync point that agreed. A deferred sync point on the node board posts it
//! ([`super::sync::defer_on_board`]) for the cost of a load, so it is kept outside the
//! table's lock. One table per process; a false alarm only costs an agreement.

use std::sync::atomic::{AtomicBool, Ordering};

static STIRRED: AtomicBool = AtomicBool::new(false);

/// The table or its shared files changed (every mutation of either says so).
pub(super) fn stir() {
    STIRRED.store(true, Ordering::Relaxed);
}

/// Whether they changed since the last [`calm`].
#[inline]
pub(super) fn stirred() -> bool {
    STIRRED.load(Ordering::Relaxed)
}

/// A sync point took the counts it agrees on (its caller holds the table's lock): what
/// changes after this is news again.
pub(super) fn calm() {
    STIRRED.store(false, Ordering::Relaxed);
}
