//! Text and JSON exports of named stacks: collapsed (`a;b;c N`, what
//! flamegraph.pl and inferno read), speedscope's file format, and a
//! Perfetto trace (protobuf) of each process's call tree as nested slices.

use crate::callgraph::{CallData, FrameName};
use std::collections::BTreeMap;

/// A frame as text: the procedure, `(inlined)` marked, `;` made safe.
fn label(f: &FrameName) -> String {
    let p = f.procedure.replace(';', ":");
    if f.inlined {
        format!("{p} (inlined)")
    } else {
        p
    }
}

/// What frame, if any, stands above each stack's root in collapsed
/// output (stackcollapse-perf puts the process name there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Root {
    /// No extra frame.
    #[default]
    None,
    /// The process's command name.
    Comm,
    /// `comm-pid`, as stackcollapse-perf's `--pid`.
    Pid,
}

/// `root;...;leaf count` lines for one event, one per distinct stack,
/// sorted; with `inline`, inlined functions are frames of their own.
pub fn collapsed(data: &CallData, event: usize, inline: bool) -> String {
    collapsed_rooted(data, event, inline, Root::None)
}

/// [`collapsed`] with a process frame above each stack's root.
pub fn collapsed_rooted(data: &CallData, event: usize, inline: bool, root: Root) -> String {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for s in data.stacks.iter().filter(|s| s.counts[event] > 0) {
        let frames = data.frames(s, inline).iter().map(label).collect::<Vec<_>>().join(";");
        let comm = || s.process.comm.replace(';', ":");
        let key = match root {
            Root::None => frames,
            Root::Comm => format!("{};{frames}", comm()),
            Root::Pid => format!("{}-{};{frames}", comm(), s.process.pid),
        };
        *lines.entry(key).or_insert(0) += s.counts[event];
    }
    lines.into_iter().map(|(k, n)| format!("{k} {n}\n")).collect()
}

/// speedscope's JSON (<https://www.speedscope.app/file-format-schema.json>):
/// one sampled profile per event; a time event's weights are nanoseconds
/// (samples x mean period), any other's samples.
pub fn speedscope(data: &CallData, name: &str) -> String {
    let mut frames: Vec<serde_json::Value> = Vec::new();
    let mut index: BTreeMap<FrameName, usize> = BTreeMap::new();
    let mut profiles = Vec::new();
    for (e, ev) in data.events.iter().enumerate() {
        let (mut samples, mut weights) = (Vec::new(), Vec::new());
        let (unit, scale) = match data.mean_period.get(e) {
            Some(&p) if p > 0 && crate::is_time_event(ev) => ("nanoseconds", p),
            _ => ("none", 1),
        };
        for s in data.stacks.iter().filter(|s| s.counts[e] > 0) {
            let ids: Vec<usize> = data
                .frames(s, true)
                .into_iter()
                .map(|f| {
                    let next = index.len();
                    *index.entry(f.clone()).or_insert_with(|| {
                        frames.push(serde_json::json!({ "name": label(&f), "file": f.image }));
                        next
                    })
                })
                .collect();
            samples.push(ids);
            weights.push(s.counts[e] * scale);
        }
        let total: u64 = weights.iter().sum();
        profiles.push(serde_json::json!({
            "type": "sampled", "name": format!("{name} ({})", ev.0), "unit": unit,
            "startValue": 0, "endValue": total, "samples": samples, "weights": weights,
        }));
    }
    serde_json::json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": { "frames": frames }, "profiles": profiles, "name": name, "exporter": "loupe",
    })
    .to_string()
}

/// A call tree: children by frame, with the samples under each node.
#[derive(Default)]
struct Tree {
    total: u64,
    children: BTreeMap<FrameName, Tree>,
}

impl Tree {
    fn add(&mut self, frames: &[FrameName], n: u64) {
        self.total += n;
        if let Some((first, rest)) = frames.split_first() {
            self.children.entry(first.clone()).or_default().add(rest, n);
        }
    }
}

/// Perfetto's trace protobuf, the subset Loupe's exports need (field
/// numbers from perfetto's `trace_packet.proto`, `track_descriptor.proto`,
/// `track_event.proto`, `counter_descriptor.proto`, `debug_annotation.proto`):
/// slices (flame charts, trace phases), instants and counters.
pub mod perfetto_proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
        #[prost(uint32, optional, tag = "13")]
        pub sequence_flags: Option<u32>,
        #[prost(message, optional, tag = "60")]
        pub track_descriptor: Option<TrackDescriptor>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        #[prost(message, optional, tag = "3")]
        pub process: Option<ProcessDescriptor>,
        #[prost(message, optional, tag = "4")]
        pub thread: Option<ThreadDescriptor>,
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
        #[prost(message, optional, tag = "8")]
        pub counter: Option<CounterDescriptor>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProcessDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub process_name: Option<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ThreadDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(int32, optional, tag = "2")]
        pub tid: Option<i32>,
        #[prost(string, optional, tag = "5")]
        pub thread_name: Option<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CounterDescriptor {
        #[prost(string, optional, tag = "6")]
        pub unit_name: Option<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        /// 1 = SLICE_BEGIN, 2 = SLICE_END, 3 = INSTANT, 4 = COUNTER.
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        #[prost(string, optional, tag = "23")]
        pub name: Option<String>,
        #[prost(message, repeated, tag = "4")]
        pub debug_annotations: Vec<DebugAnnotation>,
        #[prost(int64, optional, tag = "30")]
        pub counter_value: Option<i64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DebugAnnotation {
        #[prost(string, optional, tag = "10")]
        pub name: Option<String>,
        #[prost(uint64, optional, tag = "3")]
        pub uint_value: Option<u64>,
        #[prost(int64, optional, tag = "4")]
        pub int_value: Option<i64>,
        #[prost(double, optional, tag = "5")]
        pub double_value: Option<f64>,
        #[prost(string, optional, tag = "6")]
        pub string_value: Option<String>,
    }
}

/// A Perfetto trace (ui.perfetto.dev opens it): one track per process,
/// holding its call tree for `event` as nested slices laid side by side
/// like a flame chart; a slice lasts its samples times the mean period.
/// The database keeps counts, not sample times, so the time axis is
/// synthetic: it orders nothing, it only measures.
pub fn perfetto(data: &CallData, event: usize) -> Vec<u8> {
    use perfetto_proto::*;
    use prost::Message;
    let mut per_process: BTreeMap<(u32, String), Tree> = BTreeMap::new();
    for s in data.stacks.iter().filter(|s| s.counts[event] > 0) {
        let t = per_process.entry((s.process.pid, s.process.comm.clone())).or_default();
        t.add(&data.frames(s, true), s.counts[event]);
    }
    let ns = data.mean_period.get(event).copied().filter(|&p| p > 0).unwrap_or(1_000_000);
    let seq = 1;
    let mut packets = Vec::new();
    for (i, ((pid, comm), tree)) in per_process.iter().enumerate() {
        let uuid = 1000 + i as u64;
        packets.push(TracePacket {
            trusted_packet_sequence_id: Some(seq),
            sequence_flags: (i == 0).then_some(1),
            track_descriptor: Some(TrackDescriptor { uuid: Some(uuid), name: Some(format!("{comm} ({pid})")), ..Default::default() }),
            ..Default::default()
        });
        emit(tree, 0, ns, uuid, seq, &mut packets);
    }
    Trace { packet: packets }.encode_to_vec()
}

fn emit(tree: &Tree, start: u64, ns: u64, uuid: u64, seq: u32, out: &mut Vec<perfetto_proto::TracePacket>) {
    use perfetto_proto::*;
    let mut t = start;
    for (f, child) in &tree.children {
        let event = |ty: i32, at: u64, name: Option<String>| TracePacket {
            timestamp: Some(at),
            trusted_packet_sequence_id: Some(seq),
            track_event: Some(TrackEvent { r#type: Some(ty), track_uuid: Some(uuid), name, ..Default::default() }),
            ..Default::default()
        };
        out.push(event(1, t, Some(label(f))));
        emit(child, t, ns, uuid, seq, out);
        t += child.total * ns;
        out.push(event(2, t, None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callgraph::tests::data;

    #[test]
    fn collapsed_lines_are_root_first_with_counts() {
        // Checks the folded text of the hand-built profile, inline expansion on and off.
        let d = data(&|p| p.pid == 1);
        assert_eq!(collapsed(&d, 0, false), "[unwind stopped];c 1\nmain;a 2\nmain;a;b;c 3\nmain;a;d;c 5\n");
        assert!(collapsed(&d, 0, true).contains("main;a;d;c;inl (inlined) 5\n"));
    }

    #[test]
    fn collapsed_root_frames_name_the_process() {
        // Checks stackcollapse-perf's process root frame: comm, or comm-pid, above every stack's root.
        let d = data(&|_| true);
        let comm = collapsed_rooted(&d, 0, false, Root::Comm);
        assert!(comm.contains("app;main;a;d;c 5\n") && comm.contains("other;a 7\n"), "{comm}");
        let pid = collapsed_rooted(&d, 0, false, Root::Pid);
        assert!(pid.contains("app-1;main;a;b;c 3\n") && pid.contains("other-2;a 7\n"), "{pid}");
        assert_eq!(collapsed_rooted(&d, 0, false, Root::None), collapsed(&d, 0, false));
    }

    #[test]
    fn speedscope_weights_sum_to_the_total() {
        // Checks that the speedscope profile holds every sample, in nanoseconds for cpu-clock, and valid frame indices.
        let d = data(&|_| true);
        let v: serde_json::Value = serde_json::from_str(&speedscope(&d, "t")).unwrap();
        let p = &v["profiles"][0];
        let w: u64 = p["weights"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum();
        assert_eq!((p["unit"].as_str(), w, p["endValue"].as_u64()), (Some("nanoseconds"), 18 * 1_000_000, Some(18 * 1_000_000)));
        let nframes = v["shared"]["frames"].as_array().unwrap().len() as u64;
        assert!(p["samples"].as_array().unwrap().iter().flat_map(|s| s.as_array().unwrap()).all(|i| i.as_u64().unwrap() < nframes));
    }

    #[test]
    fn perfetto_slices_nest_and_balance() {
        // Checks that the trace decodes, begins and ends balance per track, and the root slice lasts samples x period.
        use prost::Message;
        let d = data(&|p| p.pid == 1);
        let t = perfetto_proto::Trace::decode(&*perfetto(&d, 0)).unwrap();
        let evs: Vec<&perfetto_proto::TrackEvent> = t.packet.iter().filter_map(|p| p.track_event.as_ref()).collect();
        assert_eq!(evs.iter().filter(|e| e.r#type == Some(1)).count(), evs.iter().filter(|e| e.r#type == Some(2)).count());
        let main_begin = t.packet.iter().find(|p| p.track_event.as_ref().and_then(|e| e.name.as_deref()) == Some("main")).unwrap();
        let period = d.mean_period[0];
        assert_eq!(period, 1_000_000);
        let end_of_main = t
            .packet
            .iter()
            .filter(|p| p.track_event.as_ref().and_then(|e| e.r#type) == Some(2))
            .map(|p| p.timestamp.unwrap())
            .max()
            .unwrap();
        assert_eq!(end_of_main - main_begin.timestamp.unwrap(), 10 * period);
    }
}
