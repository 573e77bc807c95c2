//! The runtime's background work, one owned part: the flush worker and the flushes in flight
//! ([`super::flights`]), the redundancy encoder ([`super::encoder`]), the CRC32 checksummer
//! ([`super::checksums`]), the deleter ([`super::deletions`]), the hang watchdog
//! ([`super::watchdog`]) and the datasets whose eviction waits for their encoding. Each worker
//! keeps its state private to its module; the runtime's other files use the questions and
//! waits below.

use std::time::Instant;

use super::checksums::Checksummer;
use super::deletions::Deleter;
use super::encoder::Encoder;
use super::flights::Flight;
use super::watchdog::Watchdog;
use crate::transfer::background::Flusher;

/// Everything a running instance does in other threads, and what it must know about it.
#[derive(Default)]
pub(super) struct Background {
    /// The background flush worker and the flushes in flight (same list on every rank).
    pub(super) flusher: Flusher,
    pub(super) flights: Vec<Flight>,
    /// Background flushes started in this run (with the run's stamp, each attempt's name).
    flush_seq: u64,
    /// Background redundancy encoding.
    pub(super) encoders: Encoder,
    /// Background CRC32 of SINGLE datasets.
    pub(super) checksums: Checksummer,
    /// Background removal of deleted datasets.
    pub(super) deleter: Deleter,
    /// Hang detection (`SCR_WATCHDOG_TIMEOUT`), when configured.
    pub(super) watchdog: Option<Watchdog>,
    /// Datasets encoded in the background whose completion evicts older datasets only once
    /// every rank's encoding finished (until then they have SINGLE protection only), oldest
    /// first; the same on every rank.
    pub(super) evict_after_encode: Vec<u64>,
}

impl Background {
    /// A new flush of dataset `id` in flight; returns the name of its attempt (`run_stamp`:
    /// the run's start time, the same on every rank).
    pub(super) fn take_off(&mut self, id: u64, run_stamp: u64) -> String {
        self.flush_seq += 1;
        let token = format!("{run_stamp}.{}", self.flush_seq);
        self.flights.push(Flight { id, started: Instant::now(), token: token.clone() });
        token
    }

    /// Dataset `id` is being flushed in the background.
    pub(super) fn in_flight(&self, id: u64) -> bool {
        self.flights.iter().any(|f| f.id == id)
    }

    /// Dataset `id` has an encoding queued or running on this rank.
    pub(super) fn encoding(&self, id: u64) -> bool {
        self.encoders.pending(id)
    }

    /// Block until this rank's background flush share and encoding of dataset `id` (if any)
    /// are finished: before its files leave.
    pub(super) fn wait_for(&self, id: u64) {
        self.flusher.wait(id);
        self.encoders.wait(id);
    }
}
