//! The fleet store's error: what went wrong (`ErrorKind`, so callers can
//! tell a server that is away, to spool for later, from one that refuses
//! us, to stop) and a message that names the cause.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The `clickhouse://` URL does not parse.
    BadUrl,
    /// Nothing answered at the address, or it stopped answering (timeout):
    /// worth retrying later.
    Unreachable,
    /// Something answered that does not speak ClickHouse's HTTP interface.
    NotClickHouse,
    /// ClickHouse refused the user or password.
    Auth,
    /// The database has no Loupe schema, or one newer than this Loupe knows.
    Schema,
    /// ClickHouse answered a query with an error.
    Server,
    /// The on-disk spool.
    Spool,
    /// An answer that does not parse as expected.
    Protocol,
    /// Bad arguments (a `--where` or time that does not parse).
    Usage,
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

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::new(ErrorKind::Spool, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
