//! The runtime's own failures: what one rank finds wrong in a step (a file's check, a
//! rebuild's plan, the job lock, background work) and sends to the others or hands back from a
//! worker thread. Each variant keeps the context a user needs (the file, the dataset, the
//! step); they travel between ranks (`serde`) and become [`crate::error::Error`] at the API.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A failure of a runtime step on one rank (or, decided by rank 0, on every rank).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub(crate) enum RuntimeError {
    /// A file failed its check: `why` says how (missing, size, CRC32).
    #[error("{}: {why}", path.display())]
    File { path: PathBuf, why: String },
    /// A metadata file the step needs does not exist.
    #[error("{} is missing", .0.display())]
    Missing(PathBuf),
    /// A shared file of a dataset that none of its writers created.
    #[error("shared file {}: {}: {why} (none of its writers {writers:?} created it)", rel.display(), path.display())]
    SharedMissing { rel: PathBuf, path: PathBuf, why: String, writers: Vec<u32> },
    /// A complete file could not be renamed into place.
    #[error("rename {} into place: {why}", to.display())]
    Rename { to: PathBuf, why: String },
    /// The names the ranks routed in an output phase clash (the message names the file and
    /// the ranks), or could not be compared.
    #[error("{0}")]
    Names(String),
    #[error("the names the ranks routed could not be compared")]
    Uncompared,
    /// Cached dataset `id` lost data (`lost` says which ranks and files) and cannot be rebuilt
    /// from its redundancy data (`why`).
    #[error("{lost}{why}")]
    Unrebuildable { id: u64, lost: String, why: String },
    /// A member of a redundancy set finds too little to rebuild from.
    #[error("{0}")]
    Unrecoverable(String),
    /// No redundancy set for the descriptor of this index (background encoding).
    #[error("no redundancy set for descriptor {0}")]
    NoSet(usize),
    /// A background worker stopped or panicked (`thread` names it).
    #[error("internal error (panic) in the {0} thread")]
    Panicked(String),
    #[error("the {0} thread has stopped")]
    Stopped(String),
    /// Background work was cancelled (its dataset left).
    #[error("cancelled")]
    Cancelled,
    /// `SCR_Init`: another run holds the prefix's job lock (`who` describes it).
    #[error(
        "SCR_Init: prefix {} is in use by {who}, which holds {}; two runs on one prefix at once would \
         restart from, fail and replace each other's checkpoints. Wait for it to end, or give this \
         job another SCR_PREFIX",
        prefix.display(),
        lock.display()
    )]
    PrefixInUse { prefix: PathBuf, who: String, lock: PathBuf },
    /// `SCR_Init`: the job lock could not be taken or read.
    #[error("SCR_Init: {0}")]
    Lock(String),
    /// A lower layer's failure on this rank (I/O, metadata, redundancy, MPI), in its words:
    /// they name their file or operation.
    #[error("{0}")]
    Below(String),
}

impl From<crate::error::Error> for RuntimeError {
    fn from(e: crate::error::Error) -> Self {
        RuntimeError::Below(e.to_string())
    }
}

impl From<crate::comm::CommError> for RuntimeError {
    fn from(e: crate::comm::CommError) -> Self {
        RuntimeError::Below(e.to_string())
    }
}

impl From<crate::persist::MetaError> for RuntimeError {
    fn from(e: crate::persist::MetaError) -> Self {
        RuntimeError::Below(e.to_string())
    }
}

impl From<RuntimeError> for crate::error::Error {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::File { path, why } => crate::error::Error::Integrity { path, why },
            e => crate::error::Error::Collective(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_their_context() {
        let e = RuntimeError::File { path: "/c/a".into(), why: "size is 1 bytes, 2 were recorded".into() };
        assert_eq!(e.to_string(), "/c/a: size is 1 bytes, 2 were recorded");
        assert_eq!(crate::error::Error::from(e).to_string(), "/c/a: size is 1 bytes, 2 were recorded");
        let e =
            RuntimeError::PrefixInUse { prefix: "/p".into(), who: "another job (x)".into(), lock: "/p/.scr/l".into() };
        assert!(e.to_string().starts_with("SCR_Init: prefix /p is in use by another job (x), which holds /p/.scr/l;"));
        assert_eq!(
            RuntimeError::Panicked("encoding".into()).to_string(),
            "internal error (panic) in the encoding thread"
        );
        assert_eq!(RuntimeError::Stopped("encoding".into()).to_string(), "the encoding thread has stopped");
    }
}
