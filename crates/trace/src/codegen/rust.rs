//! Rust stubs over `loupe_trace::stub`.

use super::{args, header};
use crate::record::max_size;
use crate::spec::{Event, FieldType, Scalar, Spec};
use std::fmt::Write;

fn rtype(s: Scalar) -> &'static str {
    match s {
        Scalar::U8 => "u8",
        Scalar::U16 => "u16",
        Scalar::U32 => "u32",
        Scalar::U64 => "u64",
        Scalar::I8 => "i8",
        Scalar::I16 => "i16",
        Scalar::I32 => "i32",
        Scalar::I64 => "i64",
        Scalar::F64 => "f64",
    }
}

fn params(ev: &Event) -> String {
    args(ev)
        .iter()
        .map(|(n, f)| match f.ty {
            FieldType::Scalar(s) => format!(", {n}: {}", rtype(s)),
            FieldType::String => format!(", {n}: &str"),
            FieldType::List(s) => format!(", {n}: &[{}]", rtype(s)),
        })
        .collect()
}

fn names(ev: &Event) -> String {
    args(ev).iter().map(|(n, _)| format!(", {n}")).collect()
}

/// The payload size of `ev`'s fields: constant bytes of the scalars plus the strings' and lists' sizes.
fn size_expr(ev: &Event) -> String {
    let fixed: usize = ev.fields.iter().filter_map(|f| if let FieldType::Scalar(s) = f.ty { Some(s.size()) } else { None }).sum();
    let mut e = fixed.to_string();
    for (n, f) in args(ev) {
        match f.ty {
            FieldType::String => e += &format!(" + str_size({n})"),
            FieldType::List(_) => e += &format!(" + list_size({n})"),
            FieldType::Scalar(_) => {}
        }
    }
    e
}

/// The arguments of `ev` that its size depends on (strings and lists).
fn sized_params(ev: &Event) -> String {
    let a: Vec<String> = params(ev).split(", ").filter(|p| p.contains('&')).map(String::from).collect();
    a.join(", ")
}

fn event(out: &mut String, ev: &Event) {
    let sn = ev.snake_name();
    let up = sn.to_uppercase();
    let _ = writeln!(out, "pub const ID_{up}: u16 = {};\npub const MAX_{up}: usize = {};\n", ev.id, max_size(ev));
    let sized: String =
        args(ev).iter().filter(|(_, f)| !matches!(f.ty, FieldType::Scalar(_))).map(|(n, _)| n.to_string()).collect::<Vec<_>>().join(", ");
    let which = if sized.is_empty() { "(fixed)" } else { "with these strings and lists" };
    let _ = writeln!(out, "/// The size of a {} record {which}.", ev.full_name());
    let _ = writeln!(out, "#[inline]\npub const fn size_{sn}({}) -> usize {{\n    record_size({})\n}}\n", sized_params(ev), size_expr(ev));
    let _ = writeln!(out, "/// Encodes {} into `out` (at least its size_{sn} bytes); returns the record's size.", ev.full_name());
    let _ = writeln!(
        out,
        "#[allow(clippy::too_many_arguments)]\n#[inline]\npub fn encode_{sn}(out: &mut [u8], ts: u64{}) -> usize {{",
        params(ev)
    );
    let _ = writeln!(out, "    let mut e = Enc::new(&mut out[..size_{sn}({sized})], ts);");
    for (n, f) in args(ev) {
        let call = match f.ty {
            FieldType::Scalar(_) => "put",
            FieldType::String => "str",
            FieldType::List(_) => "list",
        };
        let _ = writeln!(out, "    e.{call}({n});");
    }
    let _ = writeln!(out, "    e.finish(ID_{up})\n}}\n");
    let desc = ev.description.split_whitespace().collect::<Vec<_>>().join(" ");
    let _ = writeln!(out, "/// {}: {desc}", ev.full_name());
    let _ = writeln!(out, "#[allow(clippy::too_many_arguments)]\n#[inline]\npub fn {sn}({}) {{", params(ev).trim_start_matches(", "));
    let _ = writeln!(out, "    if let Some(b) = global() {{\n        write(b, size_{sn}({sized}), |slot_, stamp_| {{");
    let _ = writeln!(out, "            encode_{sn}(slot_, stamp_{});\n        }});\n    }}\n}}\n", names(ev));
}

fn decode_arm(out: &mut String, ev: &Event) {
    let _ = writeln!(out, "        {} => {{", ev.id);
    for (n, f) in args(ev) {
        let get = match f.ty {
            FieldType::Scalar(s) => format!("d.get::<{}>()?", rtype(s)),
            FieldType::String => "d.str()?".into(),
            FieldType::List(s) => format!("d.list::<{}>()?", rtype(s)),
        };
        let _ = writeln!(out, "            let {n} = {get};");
    }
    let refs: String = args(ev)
        .iter()
        .map(|(n, f)| match f.ty {
            FieldType::Scalar(_) => format!(", {n}"),
            _ => format!(", &{n}"),
        })
        .collect();
    let _ = writeln!(out, "            Some(encode_{}(out, ts{refs}))\n        }}", ev.snake_name());
}

pub fn gen(spec: &Spec) -> String {
    let mut out = header(spec, "//!");
    out.push_str("//! Log with the event functions; tracing is on when $LOUPE_TRACE_SHM names a buffer.\n\n");
    out.push_str(
        "#![allow(dead_code, clippy::all)]\nuse loupe_trace::stub::{global, list_size, record_size, str_size, write, Dec, Enc};\n\n",
    );
    spec.events.iter().for_each(|ev| event(&mut out, ev));
    out.push_str("/// The event name of an id.\npub fn event_name(id: u16) -> Option<&'static str> {\n    match id {\n");
    for ev in &spec.events {
        let _ = writeln!(out, "        {} => Some(\"{}\"),", ev.id, ev.full_name());
    }
    out.push_str("        _ => None,\n    }\n}\n\n");
    out.push_str("/// Decoder: decodes `rec` field by field and encodes it again through the\n/// typed encoder into `out`; returns the size, None if unknown or short.\n");
    out.push_str("pub fn reencode(rec: &[u8], out: &mut [u8]) -> Option<usize> {\n    let (ts, _size, id, mut d) = Dec::new(rec)?;\n    let _ = &mut d;\n    match id {\n");
    spec.events.iter().for_each(|ev| decode_arm(&mut out, ev));
    out.push_str("        _ => None,\n    }\n}\n");
    out
}
