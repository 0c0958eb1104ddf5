//! The data profiler's error: which step failed (`ErrorKind`) and what,
//! with the cause, on one line.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Opening, mapping or enabling the perf events.
    Sampling,
    /// Writing the access log or its metadata.
    Log,
    /// Reading a recording's metadata (missing or not JSON).
    Meta,
    /// An image that is not ELF, or DWARF that does not parse.
    Dwarf,
}

#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
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

impl From<gimli::Error> for Error {
    fn from(e: gimli::Error) -> Error {
        Error { kind: ErrorKind::Dwarf, message: format!("DWARF: {e}") }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
