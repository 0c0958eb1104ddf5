//! Branch-record files (profile kind 4): one per (epoch, image, event),
//! `<image key>.<event>.branches`, holding the taken branches a CPU's
//! last-branch record reported (see [`loupe_model::branches`]).
//!
//! ```text
//! magic    "LOUPEPRF", version u16 LE 1, kind u16 LE 4
//! header   image (kind u8, path str, build-id bytes, hash u8 flag + u64), event (str),
//!          stacks (varint: samples whose branch stacks were counted)
//! records  count, then sorted by (from, to): from (varint delta from the previous
//!          record's from), to - from (zigzag varint), taken (varint), mispredicted (varint, <= taken)
//! traces   count, then sorted by (start, end): start (varint delta from the previous trace's
//!          start), end - start (varint), times (varint)
//! crc32    u32 LE of every byte before it
//! ```
//! Databases without branch files read as before: nothing else looks at
//! `.branches` files, and the epoch index lists only flat profiles.

use crate::format::{begin_file, checked_body, event_key, put_bytes, put_image, put_varint, read_image, seal_file, FormatError, Reader};
use loupe_model::branches::{BranchCount, BranchProfile};
use loupe_model::{EventName, ImageId, ImageOffset};

pub const KIND_BRANCHES: u16 = 4;

/// File name of an (image, event) branch-record file.
pub fn file_name(image: &ImageId, event: &EventName) -> String {
    format!("{}.{}.branches", image.file_key(), event_key(event))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

pub fn encode(p: &BranchProfile) -> Vec<u8> {
    let mut out = begin_file(KIND_BRANCHES, 64 + p.records.len() * 6);
    put_image(&mut out, &p.image);
    put_bytes(&mut out, p.event.0.as_bytes());
    put_varint(&mut out, p.stacks);
    put_varint(&mut out, p.records.len() as u64);
    let mut last_from = 0u64;
    for (&(from, to), c) in &p.records {
        put_varint(&mut out, from.0 - last_from);
        put_varint(&mut out, zigzag(to.0.wrapping_sub(from.0) as i64));
        put_varint(&mut out, c.taken);
        put_varint(&mut out, c.mispredicted);
        last_from = from.0;
    }
    put_varint(&mut out, p.traces.len() as u64);
    let mut last_start = 0u64;
    for (&(start, end), &n) in &p.traces {
        put_varint(&mut out, start.0 - last_start);
        put_varint(&mut out, end.0 - start.0);
        put_varint(&mut out, n);
        last_start = start.0;
    }
    seal_file(out)
}

pub fn decode(b: &[u8]) -> Result<BranchProfile, FormatError> {
    let body = checked_body(b, KIND_BRANCHES)?;
    let r = &mut Reader { b: body, at: 12 };
    let image = read_image(r)?;
    let mut p = BranchProfile::new(image, EventName(r.string()?));
    p.stacks = r.varint()?;
    let mut from = 0u64;
    let mut last: Option<(u64, u64)> = None;
    for _ in 0..r.len()? {
        let at = r.at;
        from = from.checked_add(r.varint()?).ok_or(FormatError::Invalid(at, "branch source overflow"))?;
        let to = from.wrapping_add(unzigzag(r.varint()?) as u64);
        let c = BranchCount { taken: r.varint()?, mispredicted: r.varint()? };
        if c.mispredicted > c.taken {
            return Err(FormatError::Invalid(at, "more mispredictions than branches"));
        }
        if last.is_some_and(|l| l >= (from, to)) {
            return Err(FormatError::Invalid(at, "branch records out of order"));
        }
        last = Some((from, to));
        p.records.insert((ImageOffset(from), ImageOffset(to)), c);
    }
    let (mut start, mut last) = (0u64, None);
    for _ in 0..r.len()? {
        let at = r.at;
        start = start.checked_add(r.varint()?).ok_or(FormatError::Invalid(at, "trace start overflow"))?;
        let end = start.checked_add(r.varint()?).ok_or(FormatError::Invalid(at, "trace end overflow"))?;
        if last.is_some_and(|l| l >= (start, end)) {
            return Err(FormatError::Invalid(at, "traces out of order"));
        }
        last = Some((start, end));
        p.traces.insert((ImageOffset(start), ImageOffset(end)), r.varint()?);
    }
    r.finish()?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::BuildId;

    fn sample() -> BranchProfile {
        let img = ImageId { content_hash: Some(3), ..ImageId::elf("/bin/app", Some(BuildId(vec![0xee; 20]))) };
        let mut p = BranchProfile::new(img, EventName::new("cycles"));
        p.add(ImageOffset(0x1005), ImageOffset(0x1040), 1000, 12);
        p.add(ImageOffset(0x1005), ImageOffset(0x1000), 7, 7);
        p.add(ImageOffset(0x2000), ImageOffset(0x1000), 1 << 40, 0);
        p.add(ImageOffset(u64::MAX), ImageOffset(0), 1, 0);
        p.add_trace(ImageOffset(0x1040), ImageOffset(0x1100), 900);
        p.add_trace(ImageOffset(0x1040), ImageOffset(0x1040), 2);
        p.add_trace(ImageOffset(0x3000), ImageOffset(u64::MAX), 1 << 35);
        p.stacks = 99;
        p
    }

    #[test]
    fn round_trip() {
        // Checks that image, event, stacks, every (from, to, taken, mispredicted) and every trace survive, backward
        // jumps, empty ranges and extremes included.
        let p = sample();
        assert_eq!(decode(&encode(&p)).unwrap(), p);
        let empty = BranchProfile::new(ImageId::unknown(), EventName::new("x"));
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    }

    #[test]
    fn corruption_is_detected_and_never_panics() {
        // Checks truncations and single-bit flips (always an error) and that other kinds are refused by kind.
        let good = encode(&sample());
        crate::format::tests::assert_damage_detected(&good, 0x04, decode);
        let flat = crate::format::encode(&loupe_model::Profile::new(ImageId::unknown(), EventName::new("x")));
        assert_eq!(decode(&flat), Err(FormatError::UnsupportedKind(1)));
        assert_eq!(crate::format::decode(&good), Err(FormatError::UnsupportedKind(KIND_BRANCHES)));
    }
}
