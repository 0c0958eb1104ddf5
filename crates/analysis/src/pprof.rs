//! pprof export: `profile.proto` (github.com/google/pprof, Apache-2.0)
//! with mappings, locations, functions and lines filled, gzip-compressed
//! as `go tool pprof` expects. The message types are declared here with
//! prost's derive, field numbers as in the published `profile.proto`.
//!
//! Every image gets a mapping at its own synthetic base (image index <<
//! 40, so they never overlap) and a location's address is base + image
//! offset; the file offset is kept in the mapping so a reader can map
//! back. Symbols are filled in (`has_functions`), so pprof does not try
//! to symbolize again.

use crate::callgraph::CallData;
use loupe_model::{EventName, ImageId, ImageKind};
use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.get("");
        s
    }
    fn get(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.index.get(v) {
            return i;
        }
        self.table.push(v.to_string());
        self.index.insert(v.to_string(), self.table.len() as i64 - 1);
        self.table.len() as i64 - 1
    }
}

/// When the profile was taken: wall-clock start (Unix nanoseconds) and length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start_unix_nanos: i64,
    pub duration_nanos: i64,
}

/// The value types of one event: its samples, and what they measure. The
/// first event's are named as Parca, Pyroscope and `go tool pprof` expect
/// of a CPU profile (`samples/count`, `cpu/nanoseconds`); a later event's
/// carry its name. A time event's second value is samples x period in
/// nanoseconds; any other's, samples x period in events.
fn value_types(event: &EventName, first: bool, st: &mut Strings) -> [ValueType; 2] {
    let time = crate::is_time_event(event);
    let samples = if first { "samples".to_string() } else { format!("{event}_samples") };
    let measure = match (first, time) {
        (true, true) => "cpu".to_string(),
        _ => event.0.clone(),
    };
    let unit = if time { "nanoseconds" } else { "count" };
    [ValueType { r#type: st.get(&samples), unit: st.get("count") }, ValueType { r#type: st.get(&measure), unit: st.get(unit) }]
}

/// The image a sample's process ran as its program: among executables (no
/// `.so` in the file name), the one holding the outermost frame of the
/// most samples, else of the most frames. For `python3` that is the
/// interpreter binary, not `libpython`.
fn main_image(data: &CallData) -> Option<&ImageId> {
    let is_exe = |i: &ImageId| i.kind == ImageKind::Elf && !i.path.rsplit('/').next().unwrap_or("").contains(".so");
    let mut root: HashMap<&ImageId, (u64, u64)> = HashMap::new();
    for s in &data.stacks {
        let n: u64 = s.counts.iter().sum();
        let outer = s.locations.iter().rev().map(|&l| &data.locations[l as usize].image).find(|i| is_exe(i));
        if let Some(img) = outer {
            root.entry(img).or_default().1 += n;
            if s.locations.last().is_some_and(|&l| &data.locations[l as usize].image == img) {
                root.entry(img).or_default().0 += n;
            }
        }
    }
    root.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.path.cmp(&a.0.path))).map(|(i, _)| i)
}

/// Builds the profile message: per event its samples and what they
/// measure (see `value_types`), the period of the first event, the main
/// executable as mapping 1, and a `pid` and `comm` label per sample.
pub fn profile(data: &CallData, span: Span) -> Profile {
    let mut st = Strings::new();
    let mut p = Profile { time_nanos: span.start_unix_nanos, duration_nanos: span.duration_nanos, ..Default::default() };
    for (i, e) in data.events.iter().enumerate() {
        p.sample_type.extend(value_types(e, i == 0, &mut st));
    }
    if let Some(e) = data.events.first() {
        let [_, measure] = value_types(e, true, &mut st);
        p.default_sample_type = measure.r#type;
        p.period_type = Some(measure);
        p.period = data.mean_period[0] as i64;
    }
    let mut mappings: HashMap<&ImageId, u64> = HashMap::new();
    if let Some(main) = main_image(data) {
        p.mapping.push(mapping(1, main, &mut st));
        mappings.insert(main, 1);
    }
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    for (i, loc) in data.locations.iter().enumerate() {
        let next = mappings.len() as u64 + 1;
        let mid = *mappings.entry(&loc.image).or_insert_with(|| {
            p.mapping.push(mapping(next, &loc.image, &mut st));
            next
        });
        let mut func = |name: &str, file: &str, st: &mut Strings, p: &mut Profile| {
            let next = functions.len() as u64 + 1;
            *functions.entry((name.to_string(), file.to_string())).or_insert_with(|| {
                let n = st.get(name);
                p.function.push(Function { id: next, name: n, system_name: n, filename: st.get(file) });
                next
            })
        };
        // pprof lists a location's lines innermost first, the outer function last.
        let file = loc.file.clone().unwrap_or_default();
        let mut lines: Vec<Line> = loc.inlined.iter().map(|f| Line { function_id: func(f, "", &mut st, &mut p), line: 0 }).collect();
        lines.push(Line { function_id: func(&loc.procedure, &file, &mut st, &mut p), line: loc.line.unwrap_or(0) as i64 });
        p.location.push(Location { id: i as u64 + 1, mapping_id: mid, address: (mid << 40) + loc.offset.0, line: lines });
    }
    let (pid, comm) = (st.get("pid"), st.get("comm"));
    for s in &data.stacks {
        let value = s.counts.iter().zip(&data.mean_period).flat_map(|(&c, &period)| [c as i64, (c * period) as i64]).collect();
        p.sample.push(Sample {
            location_id: s.locations.iter().map(|&l| l as u64 + 1).collect(),
            value,
            label: vec![Label { key: pid, str: 0, num: s.process.pid as i64 }, Label { key: comm, str: st.get(&s.process.comm), num: 0 }],
        });
    }
    p.string_table = st.table;
    p
}

/// A mapping at its own synthetic base (`id << 40`), with the image's path and build-id.
fn mapping(id: u64, image: &ImageId, st: &mut Strings) -> Mapping {
    Mapping {
        id,
        memory_start: id << 40,
        memory_limit: (id + 1) << 40,
        file_offset: 0,
        filename: st.get(&image.path),
        build_id: st.get(&image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default()),
        has_functions: true,
        has_filenames: true,
        has_line_numbers: true,
        has_inline_frames: true,
    }
}

/// The gzip-compressed encoding `go tool pprof` reads.
pub fn encode_gz(p: &Profile) -> Vec<u8> {
    use prost::Message;
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec()).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callgraph::tests::data;
    use prost::Message;

    #[test]
    fn profile_round_trips_and_references_are_valid() {
        // Checks gzip+protobuf decoding, totals, and that every id a sample or line uses exists.
        let d = data(&|_| true);
        let bytes = encode_gz(&profile(&d, Span::default()));
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&*bytes), &mut raw).unwrap();
        let p = Profile::decode(&*raw).unwrap();
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total, 18);
        assert_eq!(p.string_table[0], "");
        let nloc = p.location.len() as u64;
        assert!(p.sample.iter().flat_map(|s| &s.location_id).all(|&l| l >= 1 && l <= nloc));
        let nfun = p.function.len() as u64;
        assert!(p.location.iter().flat_map(|l| &l.line).all(|l| l.function_id >= 1 && l.function_id <= nfun));
        let inl = p.location.iter().find(|l| l.line.len() == 2).unwrap();
        assert_eq!(p.string_table[p.function[inl.line[0].function_id as usize - 1].name as usize], "inl");
        assert_eq!(p.string_table[p.function[inl.line[1].function_id as usize - 1].name as usize], "c");
    }

    #[test]
    fn cpu_values_are_nanoseconds_and_the_program_is_mapping_one() {
        // Checks samples/count and cpu/nanoseconds (samples x 1 ms period), the span, and that the executable
        // at the root of the stacks is mapping 1 though a library holds more samples.
        use crate::callgraph::{resolve, tests::Table, Selection};
        use loupe_model::{stacks::StackProfile, ImageOffset, ProcessKey};
        let (exe, lib) = (ImageId::elf("/usr/bin/python3.11", None), ImageId::elf("/usr/lib/libpython3.11.so.1.0", None));
        let mut sp = StackProfile::new(EventName::new("cpu-clock"));
        let me = ProcessKey::new(7, "python3");
        sp.add(&me, &[(lib.clone(), ImageOffset(0x200)), (lib.clone(), ImageOffset(0x300)), (exe.clone(), ImageOffset(0x100))], 9);
        sp.add(&me, &[(lib.clone(), ImageOffset(0x400))], 4);
        sp.period_sum = 13 * 1_000_000;
        let sel = Selection { keep: &|_| true, keep_image: &|_| true };
        let d = resolve(&[sp], &[EventName::new("cpu-clock")], &sel, &mut Table);
        let p = profile(&d, Span { start_unix_nanos: 1_700_000_000_000_000_000, duration_nanos: 2_000_000_000 });
        let s = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|v| (s(v.r#type), s(v.unit))).collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        assert_eq!((s(p.default_sample_type), p.period), ("cpu", 1_000_000));
        let pt = p.period_type.as_ref().unwrap();
        assert_eq!((s(pt.r#type), s(pt.unit)), ("cpu", "nanoseconds"));
        let sums = p.sample.iter().fold((0, 0), |(a, b), x| (a + x.value[0], b + x.value[1]));
        assert_eq!(sums, (13, 13_000_000));
        assert_eq!((p.time_nanos, p.duration_nanos), (1_700_000_000_000_000_000, 2_000_000_000));
        assert_eq!((p.mapping[0].id, s(p.mapping[0].filename)), (1, "/usr/bin/python3.11"));
    }

    #[test]
    fn a_count_event_measures_events_not_time() {
        // Checks that page-faults samples are named after the event and weighed in events (samples x period).
        use crate::callgraph::{resolve, tests::Table, Selection};
        use loupe_model::{stacks::StackProfile, ImageOffset, ProcessKey};
        let app = ImageId::elf("/bin/app", None);
        let mut sp = StackProfile::new(EventName::new("page-faults"));
        sp.add(&ProcessKey::new(1, "app"), &[(app, ImageOffset(0x100))], 5);
        sp.period_sum = 5 * 10;
        let sel = Selection { keep: &|_| true, keep_image: &|_| true };
        let p = profile(&resolve(&[sp], &[EventName::new("page-faults")], &sel, &mut Table), Span::default());
        let s = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|v| (s(v.r#type), s(v.unit))).collect();
        assert_eq!(types, [("samples", "count"), ("page-faults", "count")]);
        assert_eq!(p.sample[0].value, [5, 50]);
    }
}
