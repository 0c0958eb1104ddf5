//! Export to Perfetto's protobuf trace format (ui.perfetto.dev and
//! trace_processor open it; they cannot open CTF), with the message subset
//! shared with the stack exports (`loupe_analysis::export::perfetto_proto`).
//! Tracks: one process track; under it a `phases` track where phase markers
//! become slices; one track per CPU buffer for application events (instants
//! with their fields as debug annotations); one track per thread for kernel
//! events that name a thread (faults, switches away, system calls, profiling
//! samples); one track per CPU for machine-wide kernel events (block I/O);
//! one counter track per counter of `HW::Counters::Interval`, valued at its
//! delta per interval. Timestamps are the trace's CLOCK_MONOTONIC
//! nanoseconds, written on Perfetto's default trace clock. Pure: no IO.

use crate::record::Value;
use crate::spec::{Event, PHASE_BEGIN, PHASE_END};
use crate::tracefile::Trace;
use loupe_analysis::export::perfetto_proto::*;
use prost::Message;
use std::collections::{BTreeMap, HashMap};

const SEQ: u32 = 1;
const PROCESS: u64 = 1;
const PHASES: u64 = 2;
const CPU_BASE: u64 = 100;
const KCPU_BASE: u64 = 200;
const COUNTER_BASE: u64 = 1000;
const THREAD_BASE: u64 = 1 << 32;
const SLICE_BEGIN: i32 = 1;
const SLICE_END: i32 = 2;
const INSTANT: i32 = 3;
const COUNTER: i32 = 4;

fn annotation(name: &str, v: &Value) -> DebugAnnotation {
    let mut a = DebugAnnotation { name: Some(name.to_string()), ..Default::default() };
    match v {
        Value::U(x) => a.uint_value = Some(*x),
        Value::I(x) => a.int_value = Some(*x),
        Value::F(x) => a.double_value = Some(*x),
        v => a.string_value = Some(v.to_string()),
    }
    a
}

fn descriptor(uuid: u64, name: String) -> TrackDescriptor {
    TrackDescriptor { uuid: Some(uuid), name: Some(name), parent_uuid: (uuid != PROCESS).then_some(PROCESS), ..Default::default() }
}

/// The thread a kernel event is about, if it names one.
fn thread_of(ev: &Event, fields: &[Value]) -> Option<u64> {
    let at = match ev.full_name().as_str() {
        "OS::Memory::PageFault" | "OS::Syscall::Enter" | "OS::Sched::Switch" => 0,
        "Loupe::Profile::Sample" => 1,
        _ => return None,
    };
    match fields.get(at) {
        Some(Value::U(t)) => Some(*t),
        _ => None,
    }
}

/// The process of each thread that profiling samples name (other threads are taken to be the command's).
fn process_of_threads(t: &Trace) -> HashMap<u64, i32> {
    let Some(sample) = t.spec.by_name("Loupe::Profile::Sample").map(|e| e.id) else { return HashMap::new() };
    t.entries
        .iter()
        .filter(|e| e.rec.id == sample)
        .filter_map(|e| match e.rec.fields[..] {
            [Value::U(pid), Value::U(tid), ..] => Some((tid, pid as i32)),
            _ => None,
        })
        .collect()
}

/// The trace as Perfetto protobuf bytes; `command` and `pid` name the process track (the traced command).
pub fn perfetto(t: &Trace, command: &str, pid: i32) -> Vec<u8> {
    let owners = process_of_threads(t);
    let mut tracks: BTreeMap<u64, TrackDescriptor> = BTreeMap::new();
    tracks.insert(
        PROCESS,
        TrackDescriptor {
            process: Some(ProcessDescriptor { pid: Some(pid), process_name: Some(command.into()) }),
            ..descriptor(PROCESS, command.into())
        },
    );
    tracks.insert(PHASES, descriptor(PHASES, "phases".into()));
    let mut events = Vec::new();
    let mut push = |ts: u64, e: TrackEvent| events.push((ts, e));
    for e in &t.entries {
        let Some(ev) = t.spec.by_id(e.rec.id) else { continue };
        let ts = e.rec.ts;
        if e.rec.id == PHASE_BEGIN || e.rec.id == PHASE_END {
            let begin = e.rec.id == PHASE_BEGIN;
            push(
                ts,
                TrackEvent {
                    r#type: Some(if begin { SLICE_BEGIN } else { SLICE_END }),
                    track_uuid: Some(PHASES),
                    name: begin.then(|| format!("phase {}", e.rec.fields[0])),
                    debug_annotations: if begin { vec![annotation("iteration", &e.rec.fields[1])] } else { vec![] },
                    ..Default::default()
                },
            );
        } else if ev.full_name() == "HW::Counters::Interval" {
            let Some(Value::List(vals)) = e.rec.fields.get(2) else { continue };
            for (i, v) in vals.iter().enumerate() {
                let uuid = COUNTER_BASE + i as u64;
                let name = t.counters.get(i).cloned().unwrap_or_else(|| format!("counter {i}"));
                tracks.entry(uuid).or_insert_with(|| TrackDescriptor {
                    counter: Some(CounterDescriptor { unit_name: Some("per interval".into()) }),
                    ..descriptor(uuid, name)
                });
                let Value::U(v) = v else { continue };
                push(
                    ts,
                    TrackEvent { r#type: Some(COUNTER), track_uuid: Some(uuid), counter_value: Some(*v as i64), ..Default::default() },
                );
            }
        } else {
            let kernel = ev.layer == "OS" || ev.class == "Profile";
            let uuid = match thread_of(ev, &e.rec.fields) {
                Some(tid) if kernel => {
                    let uuid = THREAD_BASE + tid;
                    tracks.entry(uuid).or_insert_with(|| TrackDescriptor {
                        thread: Some(ThreadDescriptor {
                            pid: Some(*owners.get(&tid).unwrap_or(&pid)),
                            tid: Some(tid as i32),
                            thread_name: None,
                        }),
                        ..descriptor(uuid, format!("thread {tid} (kernel events)"))
                    });
                    uuid
                }
                _ if kernel => {
                    let uuid = KCPU_BASE + e.cpu as u64;
                    tracks.entry(uuid).or_insert_with(|| descriptor(uuid, format!("cpu {} (kernel, machine-wide)", e.cpu)));
                    uuid
                }
                _ => {
                    let uuid = CPU_BASE + e.cpu as u64;
                    tracks.entry(uuid).or_insert_with(|| descriptor(uuid, format!("cpu {} (application)", e.cpu)));
                    uuid
                }
            };
            let debug_annotations = ev.fields.iter().zip(&e.rec.fields).map(|(f, v)| annotation(&f.name, v)).collect();
            push(
                ts,
                TrackEvent {
                    r#type: Some(INSTANT),
                    track_uuid: Some(uuid),
                    name: Some(ev.full_name()),
                    debug_annotations,
                    ..Default::default()
                },
            );
        }
    }
    let mut packet = vec![];
    for (i, d) in tracks.into_values().enumerate() {
        packet.push(TracePacket {
            trusted_packet_sequence_id: Some(SEQ),
            sequence_flags: (i == 0).then_some(1), // SEQ_INCREMENTAL_STATE_CLEARED
            track_descriptor: Some(d),
            ..Default::default()
        });
    }
    for (ts, e) in events {
        packet.push(TracePacket { timestamp: Some(ts), trusted_packet_sequence_id: Some(SEQ), track_event: Some(e), ..Default::default() });
    }
    loupe_analysis::export::perfetto_proto::Trace { packet }.encode_to_vec()
}

/// Reads a Perfetto protobuf trace back (for checks and tests).
pub fn decode(bytes: &[u8]) -> Result<loupe_analysis::export::perfetto_proto::Trace, prost::DecodeError> {
    loupe_analysis::export::perfetto_proto::Trace::decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;
    use crate::tracefile::Entry;

    // A phase becomes a begin/end slice pair, each counter a counter track with its deltas, a kernel
    // page fault an instant on its thread's track, an application event an instant on its CPU's track.
    #[test]
    fn perfetto_tracks_and_events() {
        let spec = crate::spec::parse(&[("l.xml", include_str!("../spec/loupe.xml"))]).unwrap();
        let rec = |cpu, ts, id, fields| Entry { cpu, rec: Record { ts, id, fields } };
        let entries = vec![
            rec(0, 1000, PHASE_BEGIN, vec![Value::U(6), Value::U(0)]),
            rec(1, 2000, 16, vec![Value::U(0), Value::U(1000), Value::List(vec![Value::U(7), Value::U(1)])]),
            rec(1, 2500, 32, vec![Value::U(42), Value::U(0x1000), Value::U(0x401000)]),
            rec(0, 3000, 49, vec![Value::U(5), Value::F(1.5), Value::Str("x".into()), Value::List(vec![])]),
            rec(0, 4000, PHASE_END, vec![Value::U(6), Value::U(0)]),
        ];
        let t = Trace { spec, entries, packets: 1, dropped: 0, counters: vec!["page-faults".into(), "cs".into()], errors: vec![] };
        let bytes = perfetto(&t, "prog", 41);
        let p = decode(&bytes).unwrap();
        let names: Vec<String> = p.packet.iter().filter_map(|p| p.track_descriptor.as_ref()?.name.clone()).collect();
        assert_eq!(names, ["prog", "phases", "cpu 0 (application)", "page-faults", "cs", "thread 42 (kernel events)"]);
        let evs: Vec<(u64, i32, Option<String>, Option<i64>)> = p
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref().map(|e| (p.timestamp.unwrap(), e.r#type.unwrap(), e.name.clone(), e.counter_value)))
            .collect();
        assert_eq!(
            evs,
            [
                (1000, SLICE_BEGIN, Some("phase 6".into()), None),
                (2000, COUNTER, None, Some(7)),
                (2000, COUNTER, None, Some(1)),
                (2500, INSTANT, Some("OS::Memory::PageFault".into()), None),
                (3000, INSTANT, Some("Loupe::App::Progress".into()), None),
                (4000, SLICE_END, None, None),
            ]
        );
        let fault = p.packet.iter().filter_map(|p| p.track_event.as_ref()).find(|e| e.r#type == Some(INSTANT)).unwrap();
        assert_eq!(fault.track_uuid, Some(THREAD_BASE + 42));
        assert_eq!(fault.debug_annotations[1].uint_value, Some(0x1000));
        let thread = p.packet.iter().filter_map(|p| p.track_descriptor.as_ref()?.thread.as_ref()).next().unwrap();
        assert_eq!((thread.pid, thread.tid), (Some(41), Some(42)));
    }
}
