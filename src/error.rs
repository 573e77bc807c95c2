//! The runtime's error type: every failure carries the context a user needs to act on it
//! (the file, the call, the dataset, the rank). Other layers have their own error types that
//! convert into this one ([`crate::persist::MetaError`]; the config layer's `ConfigError`
//! converts itself, so this module does not depend on a higher layer); the C boundary maps it
//! to `SCR_SUCCESS`/failure and prints it.

use std::io;
use std::path::PathBuf;

use crate::paths::{PathError, UnsafePath};
use crate::persist::MetaError;

/// Result alias for the runtime layers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation on a named path failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A metadata file could not be read or written.
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// The configuration is invalid (from `crate::config::ConfigError`): `at` names the file
    /// and line, the environment variable or the `SCR_Config` call.
    #[error("configuration error at {at}: {msg}")]
    Config { at: String, msg: String },
    /// An API call was made in the wrong state or with bad arguments.
    #[error("{call}: {msg}")]
    Usage { call: &'static str, msg: String },
    /// A collective step failed on at least one rank (the message says which and why).
    #[error("{0}")]
    Collective(String),
    /// A path read from metadata that is not a safe relative path.
    #[error(transparent)]
    UnsafePath(#[from] UnsafePath),
    /// A path the library refuses to use (a node-local directory that is not a directory or
    /// belongs to another user); `why` says what is wrong with it.
    #[error("{}: {why}", path.display())]
    Refused { path: PathBuf, why: String },
    /// A data file failed verification (size or CRC32).
    #[error("{path}: {why}")]
    Integrity { path: PathBuf, why: String },
    /// A call could not be served now, and the library will make up for it at a later call
    /// (a restart file held in another node's cache: `SCR_Complete_restart` copies it); the
    /// front ends report it as a warning.
    #[error("{0}")]
    Pending(String),
    /// An error of a layer above this module (redundancy, transfer), kept typed as the source
    /// (`downcast_ref` finds it); `layer` names it.
    #[error("{source}")]
    Layer { layer: &'static str, source: Box<dyn std::error::Error + Send + Sync + 'static> },
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// An I/O error on `path` while doing `op`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }

    /// A misuse of the API by `call`.
    pub fn usage(call: &'static str, msg: impl Into<String>) -> Self {
        Error::Usage { call, msg: msg.into() }
    }
}

impl From<PathError> for Error {
    fn from(e: PathError) -> Self {
        match e {
            PathError::Io { op, path, source } => Error::Io { op, path, source },
            PathError::Link { path, why } => Error::Integrity { path, why },
            PathError::Refused { path, why } => Error::Refused { path, why },
        }
    }
}

impl From<crate::comm::CommError> for Error {
    fn from(e: crate::comm::CommError) -> Self {
        Error::Collective(e.to_string())
    }
}

/// Attach a path and an operation name to an `io::Result`.
pub trait IoContext<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}
