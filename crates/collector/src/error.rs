//! The collector's error: which part of collection failed (`ErrorKind`, for
//! callers that react differently, e.g. fall back from BPF), and the cause's
//! message as the layer below wrote it.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Opening or reading perf events.
    Sampling,
    /// Loading or reading the BPF programs and maps.
    Bpf,
    /// The profile database.
    Store,
    /// Other files and sockets.
    Io,
    /// A request the collector refuses (flags that do not go together).
    Config,
    /// A recording the process's capabilities and `kernel.perf_event_paranoid` do not allow.
    Privilege,
}

/// A collection error. Displays as the cause did, so messages read as
/// before; `source` continues with the cause's own causes.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    cause: Box<dyn std::error::Error + Send + Sync>,
}

impl Error {
    pub fn new(kind: ErrorKind, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error { kind, cause: cause.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.cause.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.source()
    }
}

macro_rules! from_cause {
    ($($ty:ty => $kind:ident),* $(,)?) => {$(
        impl From<$ty> for Error {
            fn from(e: $ty) -> Error {
                Error::new(ErrorKind::$kind, e)
            }
        }
    )*};
}

from_cause! {
    loupe_perf::Error => Sampling,
    loupe_bpf::Error => Bpf,
    loupe_store::Error => Store,
    std::io::Error => Io,
    String => Config,
    &str => Config,
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_follows_the_layer_and_the_message_is_the_causes() {
        // Checks that `?` on a lower layer's error keeps its message unchanged and names the layer.
        let io: Error = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file").into();
        assert_eq!((io.kind(), io.to_string()), (ErrorKind::Io, "no such file".to_string()));
        let refused: Error = "--backend bpf needs BPF".into();
        assert_eq!((refused.kind(), refused.to_string()), (ErrorKind::Config, "--backend bpf needs BPF".to_string()));
    }
}
