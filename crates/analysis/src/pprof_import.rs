//! pprof import: a `profile.proto` (gzipped or not, from `go tool pprof`,
//! async-profiler, the OpenTelemetry profiler or `loupe export`) read back
//! into Loupe's own model, call stacks and flat profiles, so it is stored
//! and queried as recorded samples are.
//!
//! A location's image offset is `address - memory_start + file_offset` of
//! its mapping, which gives back the offsets `loupe export` wrote. Images
//! are named by their mapping's file and build-id; the names pprof gives
//! each location come along, so a store can name frames of binaries no
//! query host has.

use crate::pprof::Profile as Proto;
use loupe_model::stacks::StackProfile;
use loupe_model::{BuildId, EventName, ImageId, ImageKind, ImageOffset, ProcessKey, Profile};
use std::collections::{BTreeMap, HashMap};

/// What a pprof file holds, in Loupe's model.
#[derive(Debug, Default)]
pub struct Imported {
    /// One table of the event read.
    pub stacks: Vec<StackProfile>,
    /// Per image, samples at the leaf frame.
    pub flat: Vec<Profile>,
    /// The outer function pprof names at each (image, offset).
    pub names: Vec<(ImageId, ImageOffset, String)>,
    /// When the profile was taken (Unix seconds), if it says.
    pub time_unix: Option<u64>,
    pub event: String,
}

/// Why a file is not a pprof profile Loupe can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError(pub String);

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ImportError {}

/// Decodes `bytes` (gzip is undone when present) and converts the sample
/// value `event` names, or the first counted one: `samples/count` for a CPU
/// profile. Samples carry the `pid` and `comm` labels Loupe writes, when there.
pub fn import(bytes: &[u8], event: Option<&str>) -> Result<Imported, ImportError> {
    use prost::Message;
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut out)
            .map_err(|e| ImportError(format!("not a gzip stream: {e}")))?;
        out
    } else {
        bytes.to_vec()
    };
    let p = Proto::decode(&*raw).map_err(|e| ImportError(format!("not a pprof profile.proto: {e}")))?;
    convert(&p, event)
}

fn convert(p: &Proto, event: Option<&str>) -> Result<Imported, ImportError> {
    let s = |i: i64| p.string_table.get(i as usize).map(String::as_str).unwrap_or("");
    let (index, name) = value_index(p, event)?;
    let images: HashMap<u64, (ImageId, u64, u64)> =
        p.mapping.iter().map(|m| (m.id, (image_of(s(m.filename), s(m.build_id)), m.memory_start, m.file_offset))).collect();
    let functions: HashMap<u64, &str> = p.function.iter().map(|f| (f.id, s(f.name))).collect();
    let unknown = (ImageId { kind: ImageKind::Unknown, path: "[unknown]".into(), build_id: None, content_hash: None }, 0, 0);
    let mut locations: HashMap<u64, (ImageId, ImageOffset)> = HashMap::new();
    let mut names = Vec::new();
    for l in &p.location {
        let (image, start, file_offset) = images.get(&l.mapping_id).unwrap_or(&unknown);
        let off = ImageOffset(l.address.wrapping_sub(*start).wrapping_add(*file_offset));
        // pprof lists a location's lines innermost first: the last is the function the offset is in.
        if let Some(f) = l.line.last().and_then(|line| functions.get(&line.function_id)).filter(|n| !n.is_empty()) {
            names.push((image.clone(), off, f.to_string()));
        }
        locations.insert(l.id, (image.clone(), off));
    }
    let mut stacks = StackProfile::new(EventName::new(&name));
    let mut flat: BTreeMap<ImageId, Profile> = BTreeMap::new();
    let (pid_key, comm_key) = (p.string_table.iter().position(|x| x == "pid"), p.string_table.iter().position(|x| x == "comm"));
    for sample in &p.sample {
        let n = sample.value.get(index).copied().unwrap_or(0);
        if n <= 0 {
            continue;
        }
        let frames: Vec<(ImageId, ImageOffset)> = sample
            .location_id
            .iter()
            .map(|id| {
                locations.get(id).cloned().ok_or_else(|| ImportError(format!("a sample names location {id}, which is not in the profile")))
            })
            .collect::<Result<_, _>>()?;
        let label = |key: Option<usize>| sample.label.iter().find(|l| Some(l.key as usize) == key);
        let pid = label(pid_key).map_or(0, |l| l.num as u32);
        let comm = label(comm_key).map_or("pprof", |l| s(l.str));
        let process = ProcessKey::new(pid, comm);
        stacks.add(&process, &frames, n as u64);
        if let Some((image, off)) = frames.first() {
            flat.entry(image.clone()).or_insert_with(|| Profile::new(image.clone(), EventName::new(&name))).add(process, *off, n as u64, 0);
        }
    }
    stacks.period_sum = stacks.total_samples() * p.period.max(0) as u64;
    let time_unix = (p.time_nanos > 0).then_some(p.time_nanos as u64 / 1_000_000_000);
    let stacks = if stacks.counts.is_empty() { Vec::new() } else { vec![stacks] };
    Ok(Imported { stacks, flat: flat.into_values().collect(), names, time_unix, event: name })
}

/// Which sample value to read, and the event name it becomes: the one
/// asked for (by type name), else the first whose unit is `count`. A CPU
/// profile's `samples` (with a `cpu` period) is Loupe's `cpu-clock`.
fn value_index(p: &Proto, event: Option<&str>) -> Result<(usize, String), ImportError> {
    let s = |i: i64| p.string_table.get(i as usize).map(String::as_str).unwrap_or("");
    let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
    let cpu = p.period_type.as_ref().is_some_and(|t| s(t.r#type) == "cpu");
    let name = |t: &str| if t == "samples" && cpu { "cpu-clock".to_string() } else { t.to_string() };
    let found = match event {
        Some(e) => types.iter().position(|(t, _)| *t == e || name(t) == e),
        None => types.iter().position(|(_, u)| *u == "count").or((!types.is_empty()).then_some(0)),
    };
    let list = types.iter().map(|(t, u)| format!("{t}/{u}")).collect::<Vec<_>>().join(", ");
    let i = found.ok_or_else(|| ImportError(format!("no sample value {:?} in the profile (it has: {list})", event.unwrap_or("any"))))?;
    Ok((i, name(types[i].0)))
}

/// A mapping's image: Loupe's pseudo-paths keep their kinds.
fn image_of(path: &str, build_id: &str) -> ImageId {
    let kind = match path {
        "[vdso]" => ImageKind::Vdso,
        p if p.starts_with("[kernel") => ImageKind::Kernel,
        "[unwind stopped]" | "" => ImageKind::Unknown,
        p if p.starts_with('[') => ImageKind::Anonymous,
        _ => ImageKind::Elf,
    };
    let build_id = if build_id.is_empty() { None } else { BuildId::from_hex(build_id) };
    ImageId { kind, path: if path.is_empty() { "[unknown]".into() } else { path.into() }, build_id, content_hash: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callgraph::tests::data;
    use crate::pprof::{encode_gz, profile, Span};

    /// A stack's frames as (path, offset), its pid and its count.
    type Counted = (Vec<(String, u64)>, u32, u64);

    #[test]
    fn an_exported_profile_imports_to_the_same_stacks() {
        // Checks that `loupe export --format pprof` read back gives every stack's frames, process and count, and the leaf totals.
        let d = data(&|_| true);
        let imported = import(&encode_gz(&profile(&d, Span::default())), None).unwrap();
        assert_eq!(imported.stacks.len(), 1);
        let t = &imported.stacks[0];
        assert_eq!(t.total_samples(), 18);
        assert_eq!(imported.flat.iter().map(|p| p.total_samples()).sum::<u64>(), 18);
        let mut want: Vec<Counted> = d
            .stacks
            .iter()
            .map(|s| {
                let frames =
                    s.locations.iter().map(|&l| (d.locations[l as usize].image.path.clone(), d.locations[l as usize].offset.0)).collect();
                (frames, s.process.pid, s.counts[0])
            })
            .collect();
        let mut got: Vec<Counted> = t
            .counts
            .iter()
            .map(|(&(p, s), &n)| (t.stack(s).map(|(i, o)| (i.path.clone(), o.0)).collect(), t.processes[p as usize].pid, n))
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        assert!(!imported.names.is_empty());
        assert!(import(b"not a profile", None).is_err());
    }
}
