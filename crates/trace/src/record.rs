//! The record wire format, shared by every generated stub and the decoder.
//!
//! ```text
//! offset 0  u64 timestamp   CLOCK_MONOTONIC nanoseconds (perf's default clock)
//!        8  u16 size        whole record in bytes, header and padding included, a multiple of 8
//!       10  u16 event id
//!       12  fields in spec order, packed, little-endian:
//!           scalars as themselves; string = u16 byte length + bytes (no NUL);
//!           list = u16 element count + elements
//!           zero padding up to `size`
//! ```
//! Strings are cut to [`MAX_STRING`] bytes and lists to [`MAX_LIST`] elements,
//! identically in every language, so a record never exceeds [`MAX_RECORD`].
//! A size of 0 marks the end of the data in a packet.

use crate::spec::{Event, FieldType, Scalar, Spec};

pub const HEADER: usize = 12;
pub const MAX_STRING: usize = 1024;
pub const MAX_LIST: usize = 128;
/// Upper bound of any record's size (checked against specs by [`max_size`]).
pub const MAX_RECORD: usize = 16384;

/// A decoded field value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U(u64),
    I(i64),
    F(f64),
    Str(String),
    List(Vec<Value>),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::U(v) => write!(f, "{v}"),
            Value::I(v) => write!(f, "{v}"),
            Value::F(v) => write!(f, "{v}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(l) => {
                let parts: Vec<String> = l.iter().map(|v| v.to_string()).collect();
                write!(f, "[{}]", parts.join(", "))
            }
        }
    }
}

/// One decoded record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub ts: u64,
    pub id: u16,
    pub fields: Vec<Value>,
}

/// Why bytes do not decode as a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated record header at offset {0}")]
    Header(usize),
    #[error("record size {size} at offset {at} is not a multiple of 8 or exceeds the remaining {left} bytes")]
    Size { at: usize, size: usize, left: usize },
    #[error("unknown event id {id} at offset {at}")]
    UnknownId { at: usize, id: u16 },
    #[error("fields of {event} overrun the record at offset {at}")]
    Overrun { at: usize, event: String },
    #[error("nonzero padding after {event} at offset {at}")]
    Padding { at: usize, event: String },
}

fn put_scalar(out: &mut Vec<u8>, s: Scalar, v: &Value) {
    let bits: u64 = match *v {
        Value::U(x) => x,
        Value::I(x) => x as u64,
        Value::F(x) => x.to_bits(),
        _ => 0,
    };
    out.extend_from_slice(&bits.to_le_bytes()[..s.size()]);
}

/// Encodes a record exactly as the generated stubs do (values are truncated
/// to their wire width like a C cast).
pub fn encode(ev: &Event, ts: u64, values: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&ts.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&ev.id.to_le_bytes());
    for (f, v) in ev.fields.iter().zip(values) {
        match (f.ty, v) {
            (FieldType::Scalar(s), v) => put_scalar(&mut out, s, v),
            (FieldType::String, Value::Str(st)) => {
                let b = &st.as_bytes()[..st.len().min(MAX_STRING)];
                out.extend_from_slice(&(b.len() as u16).to_le_bytes());
                out.extend_from_slice(b);
            }
            (FieldType::List(s), Value::List(items)) => {
                let n = items.len().min(MAX_LIST);
                out.extend_from_slice(&(n as u16).to_le_bytes());
                items[..n].iter().for_each(|it| put_scalar(&mut out, s, it));
            }
            _ => out.extend_from_slice(&[0, 0]),
        }
    }
    out.resize(out.len().next_multiple_of(8), 0);
    let size = out.len() as u16;
    out[8..10].copy_from_slice(&size.to_le_bytes());
    out
}

/// The largest record an event can produce.
pub fn max_size(ev: &Event) -> usize {
    let payload: usize = ev
        .fields
        .iter()
        .map(|f| match f.ty {
            FieldType::Scalar(s) => s.size(),
            FieldType::String => 2 + MAX_STRING,
            FieldType::List(s) => 2 + MAX_LIST * s.size(),
        })
        .sum();
    (HEADER + payload).next_multiple_of(8)
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos + n)?;
        self.pos += n;
        Some(s)
    }

    fn uint(&mut self, n: usize) -> Option<u64> {
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(self.take(n)?);
        Some(u64::from_le_bytes(buf))
    }

    fn scalar(&mut self, s: Scalar) -> Option<Value> {
        let raw = self.uint(s.size())?;
        Some(match s {
            Scalar::F64 => Value::F(f64::from_bits(raw)),
            s if s.signed() => {
                let shift = 64 - 8 * s.size() as u32;
                Value::I(((raw << shift) as i64) >> shift)
            }
            _ => Value::U(raw),
        })
    }

    fn field(&mut self, ty: FieldType) -> Option<Value> {
        match ty {
            FieldType::Scalar(s) => self.scalar(s),
            FieldType::String => {
                let n = self.uint(2)? as usize;
                Some(Value::Str(String::from_utf8_lossy(self.take(n)?).into_owned()))
            }
            FieldType::List(s) => {
                let n = self.uint(2)? as usize;
                (0..n).map(|_| self.scalar(s)).collect::<Option<Vec<_>>>().map(Value::List)
            }
        }
    }
}

/// Decodes the record at `at`; returns it and its size. `Ok(None)` at a size
/// of 0 (end of data) or at the end of `bytes`.
pub fn decode_at(spec: &Spec, bytes: &[u8], at: usize) -> Result<Option<(Record, usize)>, DecodeError> {
    // A packet's tail shorter than a header is zero padding.
    if bytes.len() - at < HEADER && bytes[at..].iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let h = bytes.get(at..at + HEADER).ok_or(DecodeError::Header(at))?;
    let ts = u64::from_le_bytes(h[0..8].try_into().unwrap());
    let size = u16::from_le_bytes([h[8], h[9]]) as usize;
    let id = u16::from_le_bytes([h[10], h[11]]);
    if size == 0 {
        return Ok(None);
    }
    let left = bytes.len() - at;
    if !size.is_multiple_of(8) || size > left || size < HEADER {
        return Err(DecodeError::Size { at, size, left });
    }
    let ev = spec.by_id(id).ok_or(DecodeError::UnknownId { at, id })?;
    let body = &bytes[at..at + size];
    let mut c = Cursor { b: body, pos: HEADER };
    let overrun = || DecodeError::Overrun { at, event: ev.full_name() };
    let fields = ev.fields.iter().map(|f| c.field(f.ty)).collect::<Option<Vec<_>>>().ok_or_else(overrun)?;
    if body[c.pos..].iter().any(|&b| b != 0) || size != c.pos.next_multiple_of(8) {
        return Err(DecodeError::Padding { at, event: ev.full_name() });
    }
    Ok(Some((Record { ts, id, fields }, size)))
}

/// The bytes the record at `at` uses before its zero padding, if it decodes.
pub fn unpadded_len(spec: &Spec, bytes: &[u8], at: usize) -> Option<usize> {
    let id = u16::from_le_bytes([*bytes.get(at + 10)?, *bytes.get(at + 11)?]);
    let size = u16::from_le_bytes([bytes[at + 8], bytes[at + 9]]) as usize;
    let ev = spec.by_id(id)?;
    let mut c = Cursor { b: bytes.get(at..at + size)?, pos: HEADER };
    for f in &ev.fields {
        c.field(f.ty)?;
    }
    Some(c.pos)
}

/// Decodes every record in `bytes` (a packet's data or a test vector).
pub fn decode_all(spec: &Spec, bytes: &[u8]) -> Result<Vec<Record>, DecodeError> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((r, n)) = decode_at(spec, bytes, at)? {
        out.push(r);
        at += n;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;

    const SPEC: &str = "<events name='t'><event name='A::B::C' description='d'>
<layerId value='A'/><classId value='B'/><specifier value='C'/>
<fields><field name='x' type='int16' description='d'/><field name='s' type='string' description='d'/>
<field name='l' type='list' eltType='uint32' description='d'/></fields></event></events>";

    // Hand-derived bytes: header, int16 -2, string "hi", list [1, 258], zero padding to 32.
    #[test]
    fn encode_known_bytes() {
        let spec = parse(&[("t.xml", SPEC)]).unwrap();
        let ev = spec.by_id(16).unwrap();
        let vals = [Value::I(-2), Value::Str("hi".into()), Value::List(vec![Value::U(1), Value::U(258)])];
        let b = encode(ev, 0x0102030405060708, &vals);
        #[rustfmt::skip]
        let want = [8, 7, 6, 5, 4, 3, 2, 1, 32, 0, 16, 0,
            0xfe, 0xff, 2, 0, b'h', b'i', 2, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0];
        assert_eq!(b, want);
        let recs = decode_all(&spec, &b).unwrap();
        assert_eq!(recs, vec![Record { ts: 0x0102030405060708, id: 16, fields: vals.to_vec() }]);
    }

    // Corruption is detected: bad size, unknown id, nonzero padding.
    #[test]
    fn corrupt_records_rejected() {
        let spec = parse(&[("t.xml", SPEC)]).unwrap();
        let ev = spec.by_id(16).unwrap();
        let good = encode(ev, 5, &[Value::I(1), Value::Str(String::new()), Value::List(vec![])]);
        let mut b = good.clone();
        b[8] = 9;
        assert!(matches!(decode_all(&spec, &b), Err(DecodeError::Size { .. })));
        let mut b = good.clone();
        b[10] = 99;
        assert_eq!(decode_all(&spec, &b), Err(DecodeError::UnknownId { at: 0, id: 99 }));
        let mut b = good.clone();
        *b.last_mut().unwrap() = 1;
        assert!(matches!(decode_all(&spec, &b), Err(DecodeError::Padding { .. })));
    }

    // Strings and lists are cut at their limits; the size bound holds.
    #[test]
    fn truncation() {
        let spec = parse(&[("t.xml", SPEC)]).unwrap();
        let ev = spec.by_id(16).unwrap();
        let long = "x".repeat(5000);
        let list = vec![Value::U(7); 1000];
        let b = encode(ev, 0, &[Value::I(0), Value::Str(long), Value::List(list)]);
        assert_eq!(b.len(), max_size(ev));
        let r = decode_all(&spec, &b).unwrap();
        assert_eq!(r[0].fields[1], Value::Str("x".repeat(MAX_STRING)));
        assert!(matches!(&r[0].fields[2], Value::List(l) if l.len() == MAX_LIST));
    }
}
