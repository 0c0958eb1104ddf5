//! Runtime support for generated Rust stubs: the process-wide buffer named
//! by `$LOUPE_TRACE_SHM`, and little-endian encoding/decoding helpers that
//! produce exactly the bytes of [`crate::record`].

use crate::buffer::Buffer;
use crate::record::{HEADER, MAX_LIST, MAX_STRING};
use std::sync::OnceLock;

static GLOBAL: OnceLock<Option<Buffer>> = OnceLock::new();

/// The buffer this process logs into, if tracing is on.
#[inline]
pub fn global() -> Option<&'static Buffer> {
    GLOBAL.get_or_init(Buffer::from_env).as_ref()
}

/// Logs a record of `size` bytes encoded in place: `fill` writes it straight
/// into the reserved bytes (no staging copy), given the reservation's timestamp.
#[inline]
pub fn write(buf: &Buffer, size: usize, fill: impl FnOnce(&mut [u8], u64)) -> bool {
    buf.log(size, fill)
}

/// The size of a record whose fields take `payload` bytes: header, fields, zero padding to 8.
#[inline]
pub const fn record_size(payload: usize) -> usize {
    (HEADER + payload).next_multiple_of(8)
}

/// Wire bytes of a string field: length prefix and the string cut to [`MAX_STRING`].
#[inline]
pub const fn str_size(s: &str) -> usize {
    2 + if s.len() < MAX_STRING { s.len() } else { MAX_STRING }
}

/// Wire bytes of a list field: count prefix and the elements, cut to [`MAX_LIST`].
#[inline]
pub const fn list_size<T: Le>(l: &[T]) -> usize {
    2 + if l.len() < MAX_LIST { l.len() } else { MAX_LIST } * T::SIZE
}

/// A scalar that goes on the wire as its little-endian bytes.
pub trait Le: Copy {
    const SIZE: usize;
    fn put(self, out: &mut [u8]);
    fn get(b: &[u8]) -> Self;
}

macro_rules! le {
    ($($t:ty),*) => {$(
        impl Le for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn put(self, out: &mut [u8]) { out.copy_from_slice(&self.to_le_bytes()) }
            #[inline]
            fn get(b: &[u8]) -> Self { <$t>::from_le_bytes(b.try_into().unwrap()) }
        }
    )*};
}
le!(u8, u16, u32, u64, i8, i16, i32, i64, f64);

/// Writes one record into exactly its bytes (a reserved slot or a caller's
/// array cut to the record's size, see [`record_size`]).
pub struct Enc<'a> {
    b: &'a mut [u8],
    n: usize,
}

impl<'a> Enc<'a> {
    /// Starts the record: the timestamp, and the last 8 bytes zeroed in one
    /// store (the padding; fields written later overwrite what they cover).
    #[inline]
    pub fn new(b: &'a mut [u8], ts: u64) -> Self {
        let end = b.len();
        b[end - 8..].copy_from_slice(&0u64.to_le_bytes());
        b[0..8].copy_from_slice(&ts.to_le_bytes());
        Enc { b, n: HEADER }
    }
    #[inline]
    pub fn put<T: Le>(&mut self, v: T) {
        v.put(&mut self.b[self.n..self.n + T::SIZE]);
        self.n += T::SIZE;
    }
    #[inline]
    pub fn str(&mut self, s: &str) {
        let b = &s.as_bytes()[..s.len().min(MAX_STRING)];
        self.put(b.len() as u16);
        self.b[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
    }
    #[inline]
    pub fn list<T: Le>(&mut self, l: &[T]) {
        let l = &l[..l.len().min(MAX_LIST)];
        self.put(l.len() as u16);
        l.iter().for_each(|v| self.put(*v));
    }
    /// Writes size and id (one 32-bit store); returns the size.
    #[inline]
    pub fn finish(self, id: u16) -> usize {
        let size = self.b.len();
        debug_assert_eq!(size, self.n.next_multiple_of(8), "record sized for other values");
        self.b[8..12].copy_from_slice(&(size as u32 | (id as u32) << 16).to_le_bytes());
        size
    }
}

/// Reads one record's fields in order (generated decoders use it).
pub struct Dec<'a> {
    b: &'a [u8],
    n: usize,
}

impl<'a> Dec<'a> {
    /// Header fields (ts, size, id) and a reader positioned at the first field.
    pub fn new(b: &'a [u8]) -> Option<(u64, usize, u16, Self)> {
        let h = b.get(..HEADER)?;
        let size = u16::get(&h[8..10]) as usize;
        Some((u64::get(&h[0..8]), size, u16::get(&h[10..12]), Dec { b: b.get(..size)?, n: HEADER }))
    }
    pub fn get<T: Le>(&mut self) -> Option<T> {
        let v = T::get(self.b.get(self.n..self.n + T::SIZE)?);
        self.n += T::SIZE;
        Some(v)
    }
    pub fn str(&mut self) -> Option<String> {
        let n = self.get::<u16>()? as usize;
        let s = String::from_utf8_lossy(self.b.get(self.n..self.n + n)?).into_owned();
        self.n += n;
        Some(s)
    }
    pub fn list<T: Le>(&mut self) -> Option<Vec<T>> {
        let n = self.get::<u16>()? as usize;
        (0..n).map(|_| self.get()).collect()
    }
}
