//! Export to the Chrome trace-event JSON format, which ui.perfetto.dev and
//! chrome://tracing open: phase markers become slices (B/E), counter
//! intervals become counter tracks (C), other events instants (i) with their
//! fields as arguments. Pure: no IO.

use crate::record::Value;
use crate::spec::{FieldType, PHASE_BEGIN, PHASE_END};
use crate::tracefile::Trace;
use serde_json::{json, Map, Value as Json};

fn to_json(v: &Value) -> Json {
    match v {
        Value::U(x) => json!(x),
        Value::I(x) => json!(x),
        Value::F(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::List(l) => Json::Array(l.iter().map(to_json).collect()),
    }
}

/// The trace as a Chrome JSON trace (timestamps in microseconds from the first event).
pub fn chrome(t: &Trace) -> Json {
    let t0 = t.entries.first().map_or(0, |e| e.rec.ts);
    let mut events = Vec::new();
    for e in &t.entries {
        let Some(ev) = t.spec.by_id(e.rec.id) else { continue };
        let ts = (e.rec.ts - t0) as f64 / 1000.0;
        let mut args = Map::new();
        for (f, v) in ev.fields.iter().zip(&e.rec.fields) {
            args.insert(f.name.clone(), to_json(v));
        }
        let base = json!({"pid": 1, "tid": e.cpu, "ts": ts});
        let mut o = base.as_object().unwrap().clone();
        match e.rec.id {
            PHASE_BEGIN | PHASE_END => {
                let phase = &e.rec.fields[0];
                o.insert("name".into(), json!(format!("phase {phase}")));
                o.insert("ph".into(), json!(if e.rec.id == PHASE_BEGIN { "B" } else { "E" }));
            }
            _ if ev.fields.iter().any(|f| matches!(f.ty, FieldType::List(_))) && ev.class == "Counters" => {
                o.insert("name".into(), json!(ev.full_name()));
                o.insert("ph".into(), json!("C"));
            }
            _ => {
                o.insert("name".into(), json!(ev.full_name()));
                o.insert("ph".into(), json!("i"));
                o.insert("s".into(), json!("t"));
            }
        }
        o.insert("args".into(), Json::Object(args));
        events.push(Json::Object(o));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns",
        "otherData": {"dropped": t.dropped, "packets": t.packets, "clock": "CLOCK_MONOTONIC"}})
}
