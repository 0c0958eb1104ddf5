//! The agents' error: which step failed (`ErrorKind`) and what, with the
//! cause, on one line.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The configuration (agent names, allow-list entries, metric) is wrong.
    Config,
    /// Reading a process's state under /proc.
    Process,
    /// Reading the metric (counter file, command).
    Metric,
    /// Applying an action (process_madvise, sched_setaffinity).
    Apply,
    /// Undoing an action.
    Revert,
    /// Writing or reading the decision log or the status file.
    Log,
    /// Observing a process (access samples).
    Observe,
    /// What the action needs is missing on this machine (kernel, THP mode).
    Unavailable,
}

#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// "`what`: `cause`", of `kind`.
pub(crate) fn err(kind: ErrorKind, what: impl fmt::Display, cause: impl fmt::Display) -> Error {
    Error { kind, message: format!("{what}: {cause}") }
}

pub type Result<T> = std::result::Result<T, Error>;
