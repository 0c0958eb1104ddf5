//! Shared test vectors: for every event of a spec, a few records with
//! deterministic values (edge values, UTF-8, truncated strings and lists)
//! encoded by [`crate::record::encode`]. Each language's test suite checks
//! its generated stub against them: `<spec>.json` carries values and bytes,
//! `<spec>.txt` one hex record per line for C and Java.

use crate::export::to_json;
use crate::record::{encode, Value};
use crate::spec::{Event, FieldType, Scalar, Spec};
use serde_json::{json, Value as Json};

/// Vectors per event.
pub const PER_EVENT: u64 = 4;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
}

fn scalar(s: Scalar, k: u64, rng: &mut Lcg) -> Value {
    let bits = 8 * s.size() as u32;
    match (s, k) {
        (Scalar::F64, 0) => Value::F(-1.5),
        (Scalar::F64, 1) => Value::F(1e300),
        (Scalar::F64, _) => Value::F((rng.next() % 1_000_000) as f64 / 64.0),
        (s, 0) if s.signed() => Value::I(-(1i64 << (bits - 1))),
        (_, 0) => Value::U(u64::MAX >> (64 - bits)),
        (s, _) if s.signed() => Value::I(((rng.next() << (64 - bits)) as i64) >> (64 - bits)),
        (_, _) => Value::U(rng.next() >> (64 - bits)),
    }
}

fn field(ty: FieldType, k: u64, rng: &mut Lcg) -> Value {
    match (ty, k) {
        (FieldType::Scalar(s), _) => scalar(s, k, rng),
        (FieldType::String, 0) => Value::Str(String::new()),
        (FieldType::String, 1) => Value::Str("héllo, wörld ✓".into()),
        (FieldType::String, 2) => Value::Str("long".repeat(300)),
        (FieldType::String, _) => Value::Str(format!("s{}", rng.next() % 1000)),
        (FieldType::List(s), _) => {
            let n = [0, 3, 130, 1][k as usize % 4];
            Value::List((0..n).map(|i| scalar(s, k + i + 1, rng)).collect())
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// (values, bytes) of vector `k` of an event.
pub fn vector(ev: &Event, k: u64) -> (u64, Vec<Value>, Vec<u8>) {
    let mut rng = Lcg(ev.id as u64 * 1000 + k);
    let ts = 1_700_000_000_000_000_000 + rng.next() % 1_000_000_000;
    let vals: Vec<Value> = ev.fields.iter().map(|f| field(f.ty, k, &mut rng)).collect();
    let bytes = encode(ev, ts, &vals);
    (ts, vals, bytes)
}

/// The JSON and text vector files of a spec.
pub fn files(spec: &Spec) -> (String, String) {
    let mut arr = Vec::new();
    let mut txt = String::new();
    for ev in &spec.events {
        for k in 0..PER_EVENT {
            let (ts, vals, bytes) = vector(ev, k);
            let h = hex(&bytes);
            txt.push_str(&h);
            txt.push('\n');
            arr.push(json!({"event": ev.full_name(), "id": ev.id, "ts": ts,
                "fields": vals.iter().map(to_json).collect::<Vec<_>>(), "hex": h}));
        }
    }
    (serde_json::to_string_pretty(&Json::Array(arr)).unwrap() + "\n", txt)
}
