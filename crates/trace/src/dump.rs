//! What `loupe trace dump` shows of a record: system calls by name,
//! addresses in hex, as text or as JSON. A record's fields are typed by the
//! spec only as integers, so the meaning comes from the field's name.

use crate::record::Value;
use crate::spec::{Event, Field};
use crate::tracefile::Entry;
use serde_json::json;

#[rustfmt::skip]
mod syscalls;

/// The name of a system call of this machine's architecture.
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    let table: &[&str] = if cfg!(target_arch = "aarch64") { &syscalls::AARCH64 } else { &syscalls::X86_64 };
    usize::try_from(nr).ok().and_then(|i| table.get(i)).copied().filter(|n| !n.is_empty())
}

/// How one field's value reads.
enum Shown {
    Plain,
    Hex,
    Syscall,
}

fn shown(event: &Event, field: &Field) -> Shown {
    let name = field.name.to_ascii_lowercase();
    if event.class == "Syscall" && name == "nr" {
        Shown::Syscall
    } else if name == "ip" || name.ends_with("address") || name.ends_with("addr") {
        Shown::Hex
    } else {
        Shown::Plain
    }
}

/// `name=value` as dump prints it (`nr=write`, `ip=0x401136`).
pub fn field_text(event: &Event, field: &Field, v: &Value) -> String {
    let value = match (shown(event, field), v) {
        (Shown::Hex, Value::U(x)) => format!("{x:#x}"),
        (Shown::Syscall, Value::I(n)) => syscall_name(*n).map_or_else(|| n.to_string(), str::to_string),
        (Shown::Syscall, Value::U(n)) => syscall_name(*n as i64).map_or_else(|| n.to_string(), str::to_string),
        _ => v.to_string(),
    };
    format!("{}={value}", field.name)
}

fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::U(x) => json!(x),
        Value::I(x) => json!(x),
        Value::F(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::List(l) => l.iter().map(value_json).collect(),
    }
}

/// One record as a JSON object: time in seconds from `t0`, cpu, event and
/// fields; addresses as hex strings, a system call's name beside its number.
pub fn entry_json(event: &Event, e: &Entry, t0: u64) -> serde_json::Value {
    let mut fields = serde_json::Map::new();
    for (f, v) in event.fields.iter().zip(&e.rec.fields) {
        let value = match (shown(event, f), v) {
            (Shown::Hex, Value::U(x)) => json!(format!("{x:#x}")),
            (Shown::Syscall, Value::I(n)) => {
                fields.insert("syscall".into(), json!(syscall_name(*n)));
                json!(n)
            }
            _ => value_json(v),
        };
        fields.insert(f.name.clone(), value);
    }
    json!({
        "time": e.rec.ts.saturating_sub(t0) as f64 / 1e9,
        "cpu": e.cpu,
        "event": event.full_name(),
        "fields": fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{FieldType, Scalar};

    fn event(class: &str, fields: &[&str]) -> Event {
        let fields =
            fields.iter().map(|n| Field { name: n.to_string(), ty: FieldType::Scalar(Scalar::U64), description: String::new() }).collect();
        Event { id: 40, layer: "OS".into(), class: class.into(), specifier: "Enter".into(), description: String::new(), fields }
    }

    #[test]
    fn syscall_numbers_name_this_architecture_s_calls() {
        // Checks the generated table against numbers fixed by each ABI (x86_64: read 0, execve 59; aarch64: read 63, execve 221).
        let expect = if cfg!(target_arch = "aarch64") { [(63, "read"), (221, "execve")] } else { [(0, "read"), (59, "execve")] };
        for (nr, name) in expect {
            assert_eq!(syscall_name(nr), Some(name));
        }
        assert_eq!(syscall_name(-1), None);
        assert_eq!(syscall_name(100_000), None);
    }

    #[test]
    fn addresses_print_in_hex_and_calls_by_name() {
        // Checks dump's rendering: ip and address fields in hex, a syscall number by name, other numbers as they are.
        let sys = event("Syscall", &["tid", "nr"]);
        assert_eq!(field_text(&sys, &sys.fields[1], &Value::I(1)), if cfg!(target_arch = "aarch64") { "nr=1" } else { "nr=write" });
        assert_eq!(field_text(&sys, &sys.fields[0], &Value::U(42)), "tid=42");
        let fault = event("Memory", &["tid", "address", "ip"]);
        assert_eq!(field_text(&fault, &fault.fields[1], &Value::U(4096)), "address=0x1000");
        assert_eq!(field_text(&fault, &fault.fields[2], &Value::U(0x401136)), "ip=0x401136");
        let e = Entry { cpu: 1, rec: crate::record::Record { id: 40, ts: 2_500_000_000, fields: vec![Value::U(7), Value::I(0)] } };
        let j = entry_json(&sys, &e, 500_000_000);
        assert_eq!((j["time"].as_f64(), j["cpu"].as_u64(), j["fields"]["nr"].as_i64()), (Some(2.0), Some(1), Some(0)));
        assert_eq!(j["fields"]["syscall"], if cfg!(target_arch = "aarch64") { json!("io_setup") } else { json!("read") });
    }
}
