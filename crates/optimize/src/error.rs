//! The crate's error: what went wrong (`ErrorKind`, for callers that act on
//! it) and a message in the words the decision log and the CLI print.
//! The message is the whole text: the manager writes it into decisions as a
//! reason, so it must read the same however the error travelled.

use std::fmt;

/// What kind of step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing a file, or starting a process.
    Io,
    /// An external optimizer (llvm-bolt, a rebuild command) failed or is missing.
    Tool,
    /// The candidate does not behave as the original under the check.
    Check,
    /// A benchmark run failed.
    Benchmark,
    /// The candidate is not (significantly, or enough) faster.
    NotFaster,
    /// Installing or rolling back a version failed.
    Install,
    /// An ELF file, BOLT's table or a build-id could not be read as expected.
    Format,
    /// The configuration or the profile's inputs are not usable (wrong build, bad JSON).
    Input,
    /// The profile database (or what reads it for the caller) failed.
    Source,
}

/// An error of this crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The error with `prefix` put before its message (context as it crosses a layer).
    pub fn context(self, prefix: impl fmt::Display) -> Error {
        Error { kind: self.kind, message: format!("{prefix}: {}", self.message) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error::new(ErrorKind::Input, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The message is the whole text (the decision log's reason), context goes before it, and the kind survives.
    #[test]
    fn message_and_context() {
        let e = Error::new(ErrorKind::Check, "check: candidate's output differs").context("/x/lua");
        assert_eq!(e.to_string(), "/x/lua: check: candidate's output differs");
        assert_eq!(e.kind(), ErrorKind::Check);
    }
}
