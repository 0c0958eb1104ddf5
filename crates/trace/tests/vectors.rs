//! The shared test vectors in Rust: the generic encoder reproduces every
//! vector from its values, the generated stub (sdk/rust) re-encodes every
//! vector to the same bytes, and the generated logging function writes a
//! record the decoder reads back from a real shared-memory buffer.

#[path = "../../../sdk/rust/loupe_events.rs"]
mod loupe_events;

use loupe_trace::record::{decode_all, encode, Value};
use loupe_trace::spec::load_files;
use serde_json::Value as Json;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn value(j: &Json) -> Value {
    match j {
        Json::Number(n) if n.is_u64() => Value::U(n.as_u64().unwrap()),
        Json::Number(n) if n.is_i64() => Value::I(n.as_i64().unwrap()),
        Json::Number(n) => Value::F(n.as_f64().unwrap()),
        Json::String(s) => Value::Str(s.clone()),
        Json::Array(a) => Value::List(a.iter().map(value).collect()),
        _ => panic!("bad vector value {j}"),
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

// Generic encoder and generated stub agree with every checked-in vector.
#[test]
fn vectors_match() {
    let spec = load_files(&[&root().join("crates/trace/spec/loupe.xml")]).unwrap();
    let text = std::fs::read_to_string(root().join("sdk/vectors/loupe.json")).unwrap();
    let vectors: Vec<Json> = serde_json::from_str(&text).unwrap();
    assert_eq!(vectors.len(), spec.events.len() * 4);
    for v in &vectors {
        let want = unhex(v["hex"].as_str().unwrap());
        let ev = spec.by_name(v["event"].as_str().unwrap()).unwrap();
        let vals: Vec<Value> = v["fields"].as_array().unwrap().iter().map(value).collect();
        // Signed fields come back from JSON as U when non-negative: encode is width-exact either way.
        assert_eq!(encode(ev, v["ts"].as_u64().unwrap(), &vals), want, "{}", ev.full_name());
        let mut out = vec![0u8; 1 << 14];
        let n = loupe_events::reencode(&want, &mut out).unwrap();
        assert_eq!(&out[..n], &want[..], "{}", ev.full_name());
        assert_eq!(decode_all(&spec, &want).unwrap().len(), 1);
    }
}

// A generated logging call lands in the buffer named by $LOUPE_TRACE_SHM and decodes with its values.
#[test]
fn generated_stub_logs_into_buffer() {
    use loupe_trace::buffer::{Buffer, Geometry, ENV, PACKET_HEADER};
    let spec = load_files(&[&root().join("crates/trace/spec/loupe.xml")]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shm");
    let ncpu = std::thread::available_parallelism().unwrap().get() as u32;
    let buf = Buffer::create(&path, Geometry { ncpu, nsub: 4, sub_size: 1 << 16 }).unwrap();
    std::env::set_var(ENV, &path);
    let before = loupe_trace::buffer::now();
    loupe_events::loupe_app_progress(42, 2.5, "items", &[-1, 3]);
    let mut recs = Vec::new();
    let mut p = Vec::new();
    for cpu in 0..ncpu as usize {
        buf.flush(cpu);
        while buf.take(cpu, &mut p) {
            recs.extend(decode_all(&spec, &p[PACKET_HEADER..]).unwrap());
        }
    }
    assert_eq!(recs.len(), 1);
    assert!(recs[0].ts >= before);
    let want = [Value::U(42), Value::F(2.5), Value::Str("items".into()), Value::List(vec![Value::I(-1), Value::I(3)])];
    assert_eq!(recs[0].fields, want);
}
