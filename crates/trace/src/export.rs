//! Export to the Chrome trace-event JSON format, which ui.perfetto.dev and
//! chrome://tracing open: phase markers become slices (B/E), counter
//! intervals become counter tracks (C), other events instants (i) with their
//! fields as arguments. Pure: no IO.

use crate::record::Value;
use crate::spec::{PHASE_BEGIN, PHASE_END};
use crate::tracefile::Trace;
use serde_json::{json, Map, Value as Json};

/// A field value as JSON (also the shape of the shared test vectors).
pub(crate) fn to_json(v: &Value) -> Json {
    match v {
        Value::U(x) => json!(x),
        Value::I(x) => json!(x),
        Value::F(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::List(l) => Json::Array(l.iter().map(to_json).collect()),
    }
}

/// The trace as a Chrome JSON trace (timestamps in microseconds from the
/// first event). Phase slices are on track 0 (a phase may begin and end on
/// different CPUs); other events on track cpu+1; each counter of
/// `HW::Counters::Interval` is a counter track of its delta per interval.
pub fn chrome(t: &Trace) -> Json {
    let t0 = t.entries.first().map_or(0, |e| e.rec.ts);
    let mut events = vec![json!({"ph": "M", "pid": 1, "tid": 0, "name": "thread_name", "args": {"name": "phases"}})];
    for e in &t.entries {
        let Some(ev) = t.spec.by_id(e.rec.id) else { continue };
        let ts = (e.rec.ts - t0) as f64 / 1000.0;
        match (e.rec.id, ev.full_name().as_str()) {
            (PHASE_BEGIN | PHASE_END, _) => {
                let ph = if e.rec.id == PHASE_BEGIN { "B" } else { "E" };
                let (phase, it) = (&e.rec.fields[0], &e.rec.fields[1]);
                events.push(json!({"ph": ph, "pid": 1, "tid": 0, "ts": ts, "name": format!("phase {phase}"),
                    "args": {"iteration": to_json(it)}}));
            }
            (_, "HW::Counters::Interval") => {
                let Some(Value::List(vals)) = e.rec.fields.get(2) else { continue };
                for (i, v) in vals.iter().enumerate() {
                    let name = t.counters.get(i).cloned().unwrap_or_else(|| format!("counter {i}"));
                    events.push(json!({"ph": "C", "pid": 1, "ts": ts, "name": name, "args": {"per interval": to_json(v)}}));
                }
            }
            (_, name) => {
                let mut args = Map::new();
                for (f, v) in ev.fields.iter().zip(&e.rec.fields) {
                    args.insert(f.name.clone(), to_json(v));
                }
                events.push(json!({"ph": "i", "s": "t", "pid": 1, "tid": e.cpu + 1, "ts": ts, "name": name, "args": args}));
            }
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns",
        "otherData": {"dropped": t.dropped, "packets": t.packets, "clock": "CLOCK_MONOTONIC"}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;
    use crate::tracefile::Entry;

    // Phases become B/E slices on track 0, counters one C event per counter named from the trace, others instants.
    #[test]
    fn chrome_shapes() {
        let spec = crate::spec::parse(&[("l.xml", include_str!("../spec/loupe.xml"))]).unwrap();
        let rec = |ts, id, fields| Entry { cpu: 1, rec: Record { ts, id, fields } };
        let entries = vec![
            rec(1000, PHASE_BEGIN, vec![Value::U(6), Value::U(0)]),
            rec(3000, 16, vec![Value::U(0), Value::U(2000), Value::List(vec![Value::U(7), Value::U(1)])]),
            rec(4000, 34, vec![Value::U(5), Value::I(1)]),
            rec(5000, PHASE_END, vec![Value::U(6), Value::U(0)]),
        ];
        let t = Trace { spec, entries, packets: 1, dropped: 0, counters: vec!["page-faults".into()], errors: vec![] };
        let j = chrome(&t);
        let ev = j["traceEvents"].as_array().unwrap();
        let shape: Vec<(String, String, f64)> = ev[1..]
            .iter()
            .map(|e| (e["ph"].as_str().unwrap().into(), e["name"].as_str().unwrap().into(), e["ts"].as_f64().unwrap()))
            .collect();
        let want = [
            ("B", "phase 6", 0.0),
            ("C", "page-faults", 2.0),
            ("C", "counter 1", 2.0),
            ("i", "OS::Syscall::Enter", 3.0),
            ("E", "phase 6", 4.0),
        ];
        assert_eq!(shape, want.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), *c)).collect::<Vec<_>>());
        assert_eq!(ev[2]["args"]["per interval"], 7);
        assert_eq!(ev[4]["tid"], 2);
    }
}
