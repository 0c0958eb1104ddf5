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

/// Builds the profile message: one sample value per event (in samples),
/// a `pid` and `comm` label per sample.
pub fn profile(data: &CallData) -> Profile {
    let mut st = Strings::new();
    let mut p = Profile {
        sample_type: data.events.iter().map(|e| ValueType { r#type: st.get(&e.0), unit: st.get("count") }).collect(),
        ..Default::default()
    };
    if let Some(e) = data.events.first() {
        p.period_type = Some(ValueType { r#type: st.get(&e.0), unit: st.get("nanoseconds") });
        p.period = data.mean_period[0] as i64;
    }
    let mut mappings: HashMap<&loupe_model::ImageId, u64> = HashMap::new();
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    for (i, loc) in data.locations.iter().enumerate() {
        let next = mappings.len() as u64 + 1;
        let mid = *mappings.entry(&loc.image).or_insert_with(|| {
            p.mapping.push(Mapping {
                id: next,
                memory_start: next << 40,
                memory_limit: (next + 1) << 40,
                file_offset: 0,
                filename: st.get(&loc.image.path),
                build_id: st.get(&loc.image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default()),
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            });
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
        p.sample.push(Sample {
            location_id: s.locations.iter().map(|&l| l as u64 + 1).collect(),
            value: s.counts.iter().map(|&c| c as i64).collect(),
            label: vec![Label { key: pid, str: 0, num: s.process.pid as i64 }, Label { key: comm, str: st.get(&s.process.comm), num: 0 }],
        });
    }
    p.string_table = st.table;
    p
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
        let bytes = encode_gz(&profile(&d));
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
}
