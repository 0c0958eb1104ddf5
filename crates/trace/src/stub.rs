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

/// Logs an encoded record; the timestamp is filled in by the reservation.
#[inline]
pub fn write(buf: &Buffer, rec: &[u8]) -> bool {
    buf.log(rec.len(), |b, ts| {
        b.copy_from_slice(rec);
        b[0..8].copy_from_slice(&ts.to_le_bytes());
    })
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

/// Writes one record into a caller's array.
pub struct Enc<'a> {
    b: &'a mut [u8],
    n: usize,
}

impl<'a> Enc<'a> {
    #[inline]
    pub fn new(b: &'a mut [u8], ts: u64) -> Self {
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
    /// Pads to 8 bytes, writes size and id; returns the size.
    #[inline]
    pub fn finish(self, id: u16) -> usize {
        let size = self.n.next_multiple_of(8);
        self.b[self.n..size].fill(0);
        self.b[8..10].copy_from_slice(&(size as u16).to_le_bytes());
        self.b[10..12].copy_from_slice(&id.to_le_bytes());
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
