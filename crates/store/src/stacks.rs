//! Stack files (profile kind 2): per (epoch, event), `stacks.<event>.stacks`
//! from the first flush, then one part per later flush, `stacks.<event>.<n>.stacks`
//! (n = 1, 2, ...). A flush writes only what it collected: reading, merging
//! and rewriting the epoch's whole table at every flush cost the daemon CPU
//! and memory that grew with the epoch. Readers sum the parts in order
//! ([`merge_parts`]), which gives the table one merged file would hold.
//!
//! ```text
//! magic    "LOUPEPRF", version u16 LE 1, kind u16 LE 2
//! event (str), period_sum (varint)
//! images   count, then per image: kind (u8), path (str), build-id (bytes), hash (u8 flag + u64)
//! frames   count, then per frame: image index (varint), offset (varint)
//! stacks   count, then per stack: depth (varint), frame indices (varint each), leaf first
//! procs    count, then pid (varint), comm (str)
//! counts   count, then sorted by (process, stack): process delta, stack (delta
//!          when the process is unchanged, else absolute), samples (varints)
//! crc32    u32 LE of every byte before it
//! ```
//! Flat per-instruction profiles (kind 1) are untouched by stacks: `top`
//! without call-graph columns never reads these files.

use crate::format::{
    begin_file, checked_body, event_key, put_bytes, put_image, put_processes, put_varint, read_image, read_processes, seal_file,
    FormatError, Reader,
};
use loupe_model::stacks::{Frame, StackProfile};
use loupe_model::{EventName, ImageOffset};

pub const KIND_STACKS: u16 = 2;

/// File name of an event's stack table.
pub fn file_name(event: &EventName) -> String {
    format!("stacks.{}.stacks", event_key(event))
}

/// Parts an event's table may have before a flush compacts them: the
/// default daemon (a 60-s flush, an epoch an hour) never reaches it; a
/// run with second-long flushes and no epochs merges 64 files a read at most.
pub const MAX_PARTS: usize = 64;

/// File name of part `n` of an event's stack table (0: the first flush's).
pub fn part_name(event: &EventName, n: u32) -> String {
    match n {
        0 => file_name(event),
        n => format!("stacks.{}.{n}.stacks", event_key(event)),
    }
}

/// File name of a compaction: the sum of an event's parts 0 to `n`, which
/// supersedes them (they are deleted after it is written; a reader that
/// still sees them leaves them out).
pub fn compacted_name(event: &EventName, n: u32) -> String {
    format!("stacks.{}.upto{n}.stacks", event_key(event))
}

/// Is `name` a stack file? Then its event key, part number and whether it
/// is a compaction of the parts up to that number.
pub fn parse_name(name: &str) -> Option<(&str, u32, bool)> {
    let inner = name.strip_prefix("stacks.")?.strip_suffix(".stacks")?;
    match inner.rsplit_once('.') {
        Some((key, n)) => match n.strip_prefix("upto") {
            Some(n) => Some((key, n.parse().ok()?, true)),
            None => Some((key, n.parse().ok().filter(|&n| n > 0)?, false)),
        },
        None => Some((inner, 0, false)),
    }
}

/// The next free part number of `event` among the file names `names`.
pub fn next_part<'a>(event: &EventName, names: impl Iterator<Item = &'a str>) -> u32 {
    let key = event_key(event);
    names.filter_map(parse_name).filter(|(k, _, _)| *k == key).map(|(_, n, _)| n + 1).max().unwrap_or(0)
}

/// The stack files among `names` that hold an event's table now, in flush
/// order: per event, its newest compaction and the parts after it (older
/// compactions and the parts they sum are left out).
pub fn live_files(names: &[String]) -> Vec<String> {
    let mut newest: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for (key, n, _) in names.iter().filter_map(|n| parse_name(n)).filter(|f| f.2) {
        let e = newest.entry(key).or_insert(n);
        *e = (*e).max(n);
    }
    let mut live: Vec<&String> = names
        .iter()
        .filter(|name| match parse_name(name) {
            Some((key, n, compacted)) => match newest.get(key) {
                Some(&upto) => {
                    if compacted {
                        n == upto
                    } else {
                        n > upto
                    }
                }
                None => true,
            },
            None => false,
        })
        .collect();
    live.sort_by_key(|n| parse_name(n));
    live.into_iter().cloned().collect()
}

/// Parts summed per event, in the order given (flush order), each event
/// where its first part was.
pub fn merge_parts(parts: Vec<StackProfile>) -> Result<Vec<StackProfile>, loupe_model::MergeError> {
    let mut out: Vec<StackProfile> = Vec::new();
    for p in parts {
        match out.iter_mut().find(|m| m.event == p.event) {
            Some(m) => m.merge(&p)?,
            None => out.push(p),
        }
    }
    Ok(out)
}

pub fn encode(p: &StackProfile) -> Vec<u8> {
    let mut out = begin_file(KIND_STACKS, 64 + p.frames.len() * 4 + p.counts.len() * 3);
    put_bytes(&mut out, p.event.0.as_bytes());
    put_varint(&mut out, p.period_sum);
    put_varint(&mut out, p.images.len() as u64);
    for i in &p.images {
        put_image(&mut out, i);
    }
    put_varint(&mut out, p.frames.len() as u64);
    for f in &p.frames {
        put_varint(&mut out, f.image as u64);
        put_varint(&mut out, f.offset.0);
    }
    put_varint(&mut out, p.stacks.len() as u64);
    for s in &p.stacks {
        put_varint(&mut out, s.len() as u64);
        for &f in s {
            put_varint(&mut out, f as u64);
        }
    }
    put_processes(&mut out, &p.processes);
    put_varint(&mut out, p.counts.len() as u64);
    let (mut lp, mut ls) = (0u32, 0u32);
    for (&(pi, si), &n) in &p.counts {
        put_varint(&mut out, (pi - lp) as u64);
        put_varint(&mut out, if pi != lp { si as u64 } else { (si - ls) as u64 });
        put_varint(&mut out, n);
        (lp, ls) = (pi, si);
    }
    seal_file(out)
}

pub fn decode(b: &[u8]) -> Result<StackProfile, FormatError> {
    let body = checked_body(b, KIND_STACKS)?;
    let mut r = Reader { b: body, at: 12 };
    let p = decode_body(&mut r)?;
    r.finish()?;
    Ok(p)
}

/// An index read from the file, checked against its table's length.
fn index(r: &mut Reader, bound: usize, what: &'static str) -> Result<u32, FormatError> {
    let at = r.at;
    let v = r.varint()?;
    if v >= bound as u64 {
        return Err(FormatError::Invalid(at, what));
    }
    Ok(v as u32)
}

fn decode_body(r: &mut Reader) -> Result<StackProfile, FormatError> {
    let mut p = StackProfile::new(EventName(r.string()?));
    p.period_sum = r.varint()?;
    for _ in 0..r.len()? {
        p.images.push(read_image(r)?);
    }
    for _ in 0..r.len()? {
        let image = index(r, p.images.len(), "image index")?;
        p.frames.push(Frame { image, offset: ImageOffset(r.varint()?) });
    }
    for _ in 0..r.len()? {
        let depth = r.len()?;
        let s = (0..depth).map(|_| index(r, p.frames.len(), "frame index")).collect::<Result<Vec<u32>, _>>()?;
        p.stacks.push(s);
    }
    p.processes = read_processes(r)?;
    let (mut pi, mut si) = (0u64, 0u64);
    for _ in 0..r.len()? {
        let at = r.at;
        let dp = r.varint()?;
        let ds = r.varint()?;
        pi = pi.checked_add(dp).filter(|&x| x < p.processes.len() as u64).ok_or(FormatError::Invalid(at, "process index"))?;
        si = if dp != 0 { ds } else { si.checked_add(ds).ok_or(FormatError::Invalid(at, "stack index"))? };
        if si >= p.stacks.len() as u64 {
            return Err(FormatError::Invalid(at, "stack index"));
        }
        p.counts.insert((pi as u32, si as u32), r.varint()?);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::{BuildId, ImageId, ProcessKey};

    fn sample() -> StackProfile {
        let mut p = StackProfile::new(EventName::new("cpu-clock"));
        let app = ImageId { content_hash: Some(9), ..ImageId::elf("/bin/app", Some(BuildId(vec![0xcd; 20]))) };
        let k = ImageId::kernel(None);
        p.add(&ProcessKey::new(7, "app"), &[(k.clone(), ImageOffset(0xffff)), (app.clone(), ImageOffset(0x1000))], 3);
        p.add(&ProcessKey::new(7, "app"), &[(app.clone(), ImageOffset(0x1004)), (app.clone(), ImageOffset(0x2000))], 1 << 33);
        p.add(&ProcessKey::new(8, "b b"), &[(app, ImageOffset(u64::MAX))], 1);
        p.period_sum = 42;
        p
    }

    #[test]
    fn part_names_parse_back_and_number_on() {
        // Checks part file names: the first flush's name, numbered parts after it, other files refused.
        let ev = EventName::new("cpu-clock");
        assert_eq!((part_name(&ev, 0).as_str(), part_name(&ev, 12).as_str()), ("stacks.cpu-clock.stacks", "stacks.cpu-clock.12.stacks"));
        assert_eq!(parse_name("stacks.cpu-clock.stacks"), Some(("cpu-clock", 0, false)));
        assert_eq!(parse_name("stacks.cpu-clock.12.stacks"), Some(("cpu-clock", 12, false)));
        assert_eq!(parse_name(&compacted_name(&ev, 64)), Some(("cpu-clock", 64, true)));
        assert_eq!(parse_name("stacks.cpu-clock.0.stacks"), None);
        assert_eq!(parse_name("stacks.cpu-clock.x.stacks"), None);
        assert_eq!(parse_name("app.cpu-clock.prof"), None);
        assert_eq!(next_part(&ev, [].into_iter()), 0);
        let names = ["stacks.cpu-clock.stacks", "stacks.cpu-clock.2.stacks", "stacks.other.7.stacks", "x.prof"];
        assert_eq!(next_part(&ev, names.into_iter()), 3);
        assert_eq!(next_part(&ev, ["stacks.cpu-clock.1.stacks", "stacks.cpu-clock.upto5.stacks"].into_iter()), 6);
    }

    #[test]
    fn a_compaction_supersedes_the_parts_it_sums() {
        // Checks which files hold the table: the newest compaction and the parts after it, in flush order; older
        // compactions and the parts up to the newest (left behind until deleted) are out; other events untouched.
        let names: Vec<String> = [
            "stacks.cpu-clock.stacks",
            "stacks.cpu-clock.2.stacks",
            "stacks.cpu-clock.upto2.stacks",
            "stacks.cpu-clock.11.stacks",
            "stacks.cpu-clock.upto9.stacks",
            "stacks.cpu-clock.10.stacks",
            "stacks.off-cpu.3.stacks",
            "stacks.off-cpu.stacks",
            "a.prof",
        ]
        .map(String::from)
        .to_vec();
        let live = live_files(&names);
        assert_eq!(
            live,
            [
                "stacks.cpu-clock.upto9.stacks",
                "stacks.cpu-clock.10.stacks",
                "stacks.cpu-clock.11.stacks",
                "stacks.off-cpu.stacks",
                "stacks.off-cpu.3.stacks"
            ]
        );
    }

    #[test]
    fn parts_merged_equal_one_merged_table() {
        // Checks that summing parts per event gives what merging the same profiles one after another gives.
        let (a, mut b) = (sample(), StackProfile::new(EventName::new("cpu-clock")));
        b.add(&ProcessKey::new(9, "c"), &[(ImageId::elf("/bin/c", None), ImageOffset(4))], 5);
        let other = StackProfile::new(EventName::new("other"));
        let mut want = a.clone();
        want.merge(&b).unwrap();
        want.merge(&a).unwrap();
        let got = merge_parts(vec![a.clone(), other.clone(), b, a]).unwrap();
        assert_eq!(got, vec![want, other]);
    }

    #[test]
    fn round_trip() {
        // Checks that tables, counts and period survive encode/decode.
        let p = sample();
        assert_eq!(decode(&encode(&p)).unwrap(), p);
        let empty = StackProfile::new(EventName::new("x"));
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    }

    #[test]
    fn corruption_is_detected_and_never_panics() {
        // Checks truncations and single-bit flips: always an error, never a panic.
        let good = encode(&sample());
        crate::format::tests::assert_damage_detected(&good, 0x10, decode);
        assert_eq!(
            decode(&crate::format::encode(&loupe_model::Profile::new(ImageId::unknown(), EventName::new("x")))),
            Err(FormatError::UnsupportedKind(1))
        );
    }
}
