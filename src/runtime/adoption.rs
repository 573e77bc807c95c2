//! Transparent mode forming a dataset ([`super::transparent::adopt_output`]), one owned part
//! of the runtime: while it forms, the cached datasets eviction must keep (the application
//! still sees their files), the earlier version of the checkpoint the new dataset replaces
//! and whether the new one counts as a checkpoint of its own, and why this rank could not
//! start it. Set for one adoption and cleared after it; empty in API mode.

/// The state of the adoption under way, if any.
#[derive(Debug, Default)]
pub(super) struct Adoption {
    forming: Option<Forming>,
}

#[derive(Debug)]
struct Forming {
    /// Cached datasets eviction must keep while the new one forms.
    pinned: Vec<u64>,
    /// The cached checkpoint the new dataset is a version of (same name).
    earlier: Option<u64>,
    /// That version rewrites files of the earlier one (on some rank): a new checkpoint
    /// number, flushed when due.
    counts: bool,
    /// Why this rank could not start the dataset (reported at its completion).
    start_failed: Option<String>,
}

impl Adoption {
    /// An adoption starts: the new dataset is a version of `earlier` (if any; `counts`: one
    /// that rewrites its files), and `pinned` stay in cache while it forms.
    pub(super) fn begin(&mut self, pinned: Vec<u64>, earlier: Option<u64>, counts: bool) {
        self.forming = Some(Forming { pinned, earlier, counts, start_failed: None });
    }

    /// The adoption ended (whatever its outcome).
    pub(super) fn end(&mut self) {
        self.forming = None;
    }

    /// Transparent mode is forming a dataset: its name and flags are agreed by construction,
    /// and a local failure to start it only makes it invalid.
    pub(super) fn active(&self) -> bool {
        self.forming.is_some()
    }

    /// The cached checkpoint the dataset being formed is a new version of.
    pub(super) fn earlier(&self) -> Option<u64> {
        self.forming.as_ref().and_then(|f| f.earlier)
    }

    /// The new version rewrites files of [`Adoption::earlier`]: it counts as a checkpoint of
    /// its own.
    pub(super) fn counts(&self) -> bool {
        self.forming.as_ref().is_some_and(|f| f.counts)
    }

    /// Eviction must keep cached dataset `id` for now.
    pub(super) fn pins(&self, id: u64) -> bool {
        self.forming.as_ref().is_some_and(|f| f.pinned.contains(&id))
    }

    /// Why this rank could not start the dataset being formed (`None`: it could).
    pub(super) fn start_failed(&mut self, why: Option<String>) {
        if let Some(f) = self.forming.as_mut() {
            f.start_failed = why;
        }
    }

    /// [`Adoption::start_failed`]'s reason, taken.
    pub(super) fn take_start_failed(&mut self) -> Option<String> {
        self.forming.as_mut().and_then(|f| f.start_failed.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adoption_holds_its_pins_and_version_until_it_ends() {
        let mut a = Adoption::default();
        assert!(!a.active() && a.earlier().is_none() && !a.counts() && !a.pins(3));
        a.start_failed(Some("ignored: nothing forms".into()));
        assert_eq!(a.take_start_failed(), None);
        a.begin(vec![3, 5], Some(3), true);
        assert!(a.active() && a.counts() && a.pins(3) && a.pins(5) && !a.pins(4));
        assert_eq!(a.earlier(), Some(3));
        a.start_failed(Some("disk full".into()));
        assert_eq!(a.take_start_failed().as_deref(), Some("disk full"));
        assert_eq!(a.take_start_failed(), None);
        a.end();
        assert!(!a.active() && a.earlier().is_none() && !a.counts() && !a.pins(3));
    }
}
