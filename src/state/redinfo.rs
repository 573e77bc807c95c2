//! How one rank's part of a cached dataset is protected: the scheme applied, the set it
//! belongs to and its place there, and its redundancy file. Recorded in the rank's filemap
//! and in scavenged rank filemaps; the schemes themselves live in `crate::redundancy`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::desc::Scheme;

/// How this rank's part of a dataset is protected (recorded with the dataset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedInfo {
    /// The scheme applied.
    pub(crate) scheme: Scheme,
    /// Which redundancy set of the descriptor this rank belongs to.
    pub(crate) set_id: usize,
    /// World ranks of the set members, in set order (as they were when the dataset was
    /// written).
    pub(crate) ranks: Vec<i32>,
    /// This rank's position in the set.
    pub(crate) index: usize,
    /// Losses tolerated per set (PARTNER: 1, with no two neighbours lost).
    pub(crate) failures: usize,
    /// XOR/RS: the chunk size; PARTNER: the size of the left neighbour's copy.
    pub(crate) chunk: u64,
    /// The redundancy file.
    pub(crate) file: PathBuf,
}

impl RedInfo {
    /// Payload bytes of the redundancy file.
    pub(crate) fn payload(&self) -> u64 {
        match self.scheme {
            Scheme::Partner => self.chunk,
            _ => self.failures as u64 * self.chunk,
        }
    }

    /// Whether a set can be rebuilt after losing the members `lost` (set indices).
    pub(crate) fn tolerates(&self, lost: &[usize]) -> bool {
        let n = self.ranks.len();
        match self.scheme {
            Scheme::Single => lost.is_empty(),
            Scheme::Partner => lost.len() < n && lost.iter().all(|&l| !lost.contains(&((l + 1) % n))),
            Scheme::Xor | Scheme::Rs => lost.len() <= self.failures,
        }
    }
}
