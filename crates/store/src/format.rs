//! The `.prof` file format: one (image, event) profile, compact and
//! checksummed.
//!
//! ```text
//! magic    8 bytes  "LOUPEPRF"
//! version  u16 LE   1
//! kind     u16 LE   1 = flat pc profile (2 = stacks: see [`crate::stacks`]; 3 = data accesses: reserved;
//!                   4 = branch records: see [`crate::branches`])
//! header   image kind (u8), path (str), build-id (bytes), content hash (u8 flag + u64),
//!          event (str), period_sum (varint)
//! procs    count (varint), then per process: pid (varint), comm (str)
//! entries  count (varint), then per entry sorted by (process, offset):
//!          process delta (varint), offset delta (varint; absolute when the
//!          process changed), count (varint)
//! crc32    u32 LE   of every byte before it
//! ```
//! `str` and `bytes` are a varint length followed by the bytes. Varints are
//! unsigned LEB128.

use loupe_model::{BuildId, EventName, ImageId, ImageKind, ImageOffset, ProcessKey, Profile};

pub const MAGIC: &[u8; 8] = b"LOUPEPRF";
pub const VERSION: u16 = 1;
pub const KIND_FLAT: u16 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("not a Loupe profile (bad magic)")]
    BadMagic,
    #[error("unsupported profile format version {0} (this Loupe reads {VERSION})")]
    UnsupportedVersion(u16),
    #[error("unsupported profile kind {0}")]
    UnsupportedKind(u16),
    #[error("checksum mismatch (file is corrupt)")]
    Checksum,
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("invalid field at byte {0}: {1}")]
    Invalid(usize, &'static str),
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(crate) fn kind_code(k: ImageKind) -> u8 {
    match k {
        ImageKind::Elf => 0,
        ImageKind::Kernel => 1,
        ImageKind::KernelModule => 2,
        ImageKind::Vdso => 3,
        ImageKind::Anonymous => 4,
        ImageKind::Unknown => 5,
    }
}

pub(crate) fn kind_from(c: u8) -> Option<ImageKind> {
    Some(match c {
        0 => ImageKind::Elf,
        1 => ImageKind::Kernel,
        2 => ImageKind::KernelModule,
        3 => ImageKind::Vdso,
        4 => ImageKind::Anonymous,
        5 => ImageKind::Unknown,
        _ => return None,
    })
}

/// An event name as it stands in file names: anything but ASCII letters,
/// digits and `-` becomes `_`.
pub(crate) fn event_key(event: &EventName) -> String {
    event.0.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// A new file: magic, version and kind.
pub(crate) fn begin_file(kind: u16, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out
}

/// Appends the CRC32 of everything written so far.
pub(crate) fn seal_file(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// An image identity: kind (u8), path (str), build-id (bytes), content hash (u8 flag + u64).
pub(crate) fn put_image(out: &mut Vec<u8>, image: &ImageId) {
    out.push(kind_code(image.kind));
    put_bytes(out, image.path.as_bytes());
    put_bytes(out, image.build_id.as_ref().map_or(&[][..], |b| &b.0));
    match image.content_hash {
        Some(h) => {
            out.push(1);
            out.extend_from_slice(&h.to_le_bytes());
        }
        None => out.push(0),
    }
}

/// A process table: count, then pid (varint) and comm (str) each.
pub(crate) fn put_processes(out: &mut Vec<u8>, processes: &[ProcessKey]) {
    put_varint(out, processes.len() as u64);
    for p in processes {
        put_varint(out, p.pid as u64);
        put_bytes(out, p.comm.as_bytes());
    }
}

pub fn encode(p: &Profile) -> Vec<u8> {
    let mut out = begin_file(KIND_FLAT, 64 + p.entries.len() * 3);
    put_image(&mut out, &p.image);
    put_bytes(&mut out, p.event.0.as_bytes());
    put_varint(&mut out, p.period_sum);
    put_processes(&mut out, &p.processes);
    put_varint(&mut out, p.entries.len() as u64);
    let (mut last_proc, mut last_off) = (0u32, 0u64);
    for (&(pi, off), &n) in &p.entries {
        put_varint(&mut out, (pi - last_proc) as u64);
        let delta = if pi != last_proc { off.0 } else { off.0 - last_off };
        put_varint(&mut out, delta);
        put_varint(&mut out, n);
        (last_proc, last_off) = (pi, off.0);
    }
    seal_file(out)
}

pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn byte(&mut self) -> Result<u8, FormatError> {
        let v = *self.b.get(self.at).ok_or(FormatError::Truncated(self.at))?;
        self.at += 1;
        Ok(v)
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(FormatError::Truncated(self.b.len()))?;
        let v = &self.b[self.at..end];
        self.at = end;
        Ok(v)
    }
    pub(crate) fn varint(&mut self) -> Result<u64, FormatError> {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let at = self.at;
            let b = self.byte()?;
            if shift > 63 {
                return Err(FormatError::Invalid(at, "varint too long"));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }
    pub(crate) fn len(&mut self) -> Result<usize, FormatError> {
        let at = self.at;
        let n = self.varint()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(FormatError::Invalid(at, "length beyond end of file"));
        }
        Ok(n as usize)
    }
    /// Checks the body was read to its end: bytes left over mean a damaged or foreign file.
    pub(crate) fn finish(&self) -> Result<(), FormatError> {
        if self.at != self.b.len() {
            return Err(FormatError::Invalid(self.at, "trailing bytes"));
        }
        Ok(())
    }
    pub(crate) fn string(&mut self) -> Result<String, FormatError> {
        let n = self.len()?;
        let at = self.at;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| FormatError::Invalid(at, "string is not UTF-8"))
    }
}

/// Checks a file's frame — magic, version, checksum, kind — and returns
/// everything before the checksum (the header included: readers start at 12).
pub(crate) fn checked_body(b: &[u8], kind: u16) -> Result<&[u8], FormatError> {
    if b.len() < 8 || &b[..8] != MAGIC {
        return Err(if b.len() < 8 && MAGIC.starts_with(b) { FormatError::Truncated(b.len()) } else { FormatError::BadMagic });
    }
    if b.len() < 16 {
        return Err(FormatError::Truncated(b.len()));
    }
    let version = u16::from_le_bytes([b[8], b[9]]);
    if version != VERSION {
        return Err(FormatError::UnsupportedVersion(version));
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(FormatError::Checksum);
    }
    let found = u16::from_le_bytes([b[10], b[11]]);
    if found != kind {
        return Err(FormatError::UnsupportedKind(found));
    }
    Ok(body)
}

pub fn decode(b: &[u8]) -> Result<Profile, FormatError> {
    let body = checked_body(b, KIND_FLAT)?;
    decode_body(&mut Reader { b: body, at: 12 })
}

pub(crate) fn read_image(r: &mut Reader) -> Result<ImageId, FormatError> {
    let at = r.at;
    let kind = kind_from(r.byte()?).ok_or(FormatError::Invalid(at, "image kind"))?;
    let path = r.string()?;
    let n = r.len()?;
    let bid = r.take(n)?;
    let content_hash = match r.byte()? {
        0 => None,
        _ => Some(u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"))),
    };
    Ok(ImageId { kind, path, build_id: (!bid.is_empty()).then(|| BuildId(bid.to_vec())), content_hash })
}

pub(crate) fn read_processes(r: &mut Reader) -> Result<Vec<ProcessKey>, FormatError> {
    (0..r.len()?).map(|_| Ok(ProcessKey { pid: r.varint()? as u32, comm: r.string()? })).collect()
}

fn decode_body(r: &mut Reader) -> Result<Profile, FormatError> {
    let image = read_image(r)?;
    let mut p = Profile::new(image, EventName(r.string()?));
    p.period_sum = r.varint()?;
    p.processes = read_processes(r)?;
    let nprocs = p.processes.len();
    let nentries = r.len()?;
    let (mut pi, mut off) = (0u64, 0u64);
    for _ in 0..nentries {
        let at = r.at;
        let dp = r.varint()?;
        let d = r.varint()?;
        off = if dp != 0 { d } else { off.checked_add(d).ok_or(FormatError::Invalid(at, "offset overflow"))? };
        pi = pi.checked_add(dp).filter(|&x| x < nprocs as u64).ok_or(FormatError::Invalid(at, "process index"))?;
        let n = r.varint()?;
        p.entries.insert((pi as u32, ImageOffset(off)), n);
    }
    r.finish()?;
    Ok(p)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sample() -> Profile {
        let img = ImageId { content_hash: Some(7), ..ImageId::elf("/usr/lib/libc.so.6", Some(BuildId(vec![0xab; 20]))) };
        let mut p = Profile::new(img, EventName::new("cpu-clock"));
        p.add(ProcessKey::new(10, "a"), ImageOffset(0x1000), 3, 0);
        p.add(ProcessKey::new(11, "b b"), ImageOffset(u64::MAX - 1), 1, 0);
        p.add(ProcessKey::new(10, "a"), ImageOffset(0x1004), 1 << 40, 0);
        p.add(ProcessKey::new(12, "c"), ImageOffset(0), 1, 0);
        p.period_sum = 123_456_789;
        p
    }

    #[test]
    fn round_trip() {
        // Checks that every field survives encode/decode, including huge offsets and counts.
        let p = sample();
        assert_eq!(decode(&encode(&p)).unwrap(), p);
        let empty = Profile::new(ImageId::unknown(), EventName::new("x"));
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    }

    /// Asserts every truncation of `good` and every flip of `mask` at each byte is an error, never a panic.
    pub(crate) fn assert_damage_detected<T: std::fmt::Debug>(good: &[u8], mask: u8, decode: fn(&[u8]) -> Result<T, FormatError>) {
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_err(), "truncation to {n} bytes went unnoticed");
        }
        for at in 0..good.len() {
            let mut b = good.to_vec();
            b[at] ^= mask;
            assert!(decode(&b).is_err(), "flip at {at} went unnoticed");
        }
    }

    #[test]
    fn corruption_is_detected_and_never_panics() {
        // Checks truncation, bit flips and random bytes: errors, never panics, never a wrong profile.
        let good = encode(&sample());
        assert_damage_detected(&good, 0x01, decode);
        let mut rng = 0x1234_5678u64;
        for i in 0..5000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut b = good.clone();
            let at = (rng as usize) % b.len();
            b[at] ^= 1 << (i % 8);
            assert!(decode(&b).is_err(), "flip at {at} went unnoticed");
            let junk: Vec<u8> = (0..(rng % 64)).map(|k| (rng >> (k % 56)) as u8).collect();
            let _ = decode(&junk);
        }
        assert_eq!(decode(b"LOUPEPRF\x02\x00\x01\x00xxxx"), Err(FormatError::UnsupportedVersion(2)));
    }

    #[test]
    fn dense_profiles_take_few_bytes_per_entry() {
        // Checks compactness: 10k entries 4 bytes apart with small counts cost < 4 bytes each.
        let mut p = Profile::new(ImageId::elf("/bin/x", None), EventName::new("cpu-clock"));
        for i in 0..10_000u64 {
            p.add(ProcessKey::new(1, "x"), ImageOffset(0x400000 + 4 * i), 1 + i % 50, 0);
        }
        let per_entry = encode(&p).len() as f64 / 10_000.0;
        assert!(per_entry < 4.0, "{per_entry} bytes per entry");
    }
}
