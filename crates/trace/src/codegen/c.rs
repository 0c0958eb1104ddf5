//! C (and C++) header-only stubs over `sdk/c/loupe_trace.h`.

use super::{args, header};
use crate::record::{max_size, MAX_LIST, MAX_STRING};
use crate::spec::{Event, FieldType, Scalar, Spec};
use std::fmt::Write;

fn ctype(s: Scalar) -> &'static str {
    match s {
        Scalar::U8 => "uint8_t",
        Scalar::U16 => "uint16_t",
        Scalar::U32 => "uint32_t",
        Scalar::U64 => "uint64_t",
        Scalar::I8 => "int8_t",
        Scalar::I16 => "int16_t",
        Scalar::I32 => "int32_t",
        Scalar::I64 => "int64_t",
        Scalar::F64 => "double",
    }
}

fn params(ev: &Event) -> String {
    let mut p = Vec::new();
    for (n, f) in args(ev) {
        match f.ty {
            FieldType::Scalar(s) => p.push(format!("{} {n}", ctype(s))),
            FieldType::String => p.push(format!("const char *{n}")),
            FieldType::List(s) => p.push(format!("const {} *{n}, size_t {n}_len", ctype(s))),
        }
    }
    p.join(", ")
}

fn names(ev: &Event) -> String {
    let mut p = Vec::new();
    for (n, f) in args(ev) {
        match f.ty {
            FieldType::List(_) => p.push(format!("{n}, {n}_len")),
            _ => p.push(n),
        }
    }
    p.join(", ")
}

fn comma(s: String) -> String {
    if s.is_empty() {
        s
    } else {
        format!(", {s}")
    }
}

fn event(out: &mut String, ev: &Event) {
    let sn = ev.snake_name();
    let up = sn.to_uppercase();
    let _ = writeln!(out, "/* {}: {} */", ev.full_name(), ev.description.replace("*/", "* /"));
    let _ = writeln!(out, "#define TRACE_ID_{up} {}\n#define TRACE_MAX_{up} {}", ev.id, max_size(ev));
    let _ = writeln!(out, "static inline uint32_t trace_encode_{sn}(uint8_t *rec, uint64_t ts{}) {{", comma(params(ev)));
    out.push_str("    uint8_t *p = loupe_put(rec, &ts, 8) + 4;\n");
    for (n, f) in args(ev) {
        let line = match f.ty {
            FieldType::Scalar(s) => format!("p = loupe_put(p, &{n}, {});", s.size()),
            FieldType::String => format!("p = loupe_put_str(p, {n});"),
            FieldType::List(s) => format!("p = loupe_put_list(p, {n}, {n}_len, {});", s.size()),
        };
        let _ = writeln!(out, "    {line}");
    }
    let _ = writeln!(out, "    return loupe_finish(rec, p, {});\n}}", ev.id);
    let _ = writeln!(out, "static inline void trace_{sn}({}) {{", if ev.fields.is_empty() { "void".into() } else { params(ev) });
    let _ = writeln!(out, "    uint8_t rec[TRACE_MAX_{up}];\n    if (!loupe_trace_on()) return;");
    let _ = writeln!(out, "    loupe_trace_write(rec, trace_encode_{sn}(rec, 0{}));\n}}\n", comma(names(ev)));
}

fn decode_case(out: &mut String, ev: &Event) {
    let _ = writeln!(out, "    case {}: {{", ev.id);
    for (n, f) in args(ev) {
        let line = match f.ty {
            FieldType::Scalar(s) => format!("{} {n}; memcpy(&{n}, p, {}); p += {};", ctype(s), s.size(), s.size()),
            FieldType::String => format!(
                "char {n}[{}]; uint16_t {n}_n; memcpy(&{n}_n, p, 2); memcpy({n}, p + 2, {n}_n); {n}[{n}_n] = 0; p += 2 + {n}_n;",
                MAX_STRING + 1
            ),
            FieldType::List(s) => format!(
                "{t} {n}[{MAX_LIST}]; uint16_t {n}_c; size_t {n}_len; memcpy(&{n}_c, p, 2); {n}_len = {n}_c; memcpy({n}, p + 2, {n}_c * {sz}); p += 2 + {n}_c * {sz};",
                t = ctype(s),
                sz = s.size()
            ),
        };
        let _ = writeln!(out, "        {line}");
    }
    let _ = writeln!(out, "        (void)p;\n        return trace_encode_{}(out, ts{});\n    }}", ev.snake_name(), comma(names(ev)));
}

pub fn gen(spec: &Spec) -> String {
    let guard = format!("{}_EVENTS_H", crate::spec::snake(&spec.name).to_uppercase());
    let mut out = header(spec, "/*");
    out.pop();
    out.push_str(" */\n");
    let _ = writeln!(out, "#ifndef {guard}\n#define {guard}\n#include \"loupe_trace.h\"\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n");
    spec.events.iter().for_each(|ev| event(&mut out, ev));
    out.push_str("/* Event name of an id, or NULL. */\nstatic inline const char *trace_event_name(uint16_t id) {\n    switch (id) {\n");
    for ev in &spec.events {
        let _ = writeln!(out, "    case {}: return \"{}\";", ev.id, ev.full_name());
    }
    out.push_str("    default: return 0;\n    }\n}\n\n");
    out.push_str("/* Decoder: decodes the record `in` field by field and encodes it again\n * through the typed encoder into `out`; returns its size, 0 if unknown. */\n");
    out.push_str("static inline uint32_t trace_reencode(const uint8_t *in, uint8_t *out) {\n");
    out.push_str(
        "    uint64_t ts; uint16_t id; const uint8_t *p = in + 12;\n    memcpy(&ts, in, 8); memcpy(&id, in + 10, 2);\n    switch (id) {\n",
    );
    spec.events.iter().for_each(|ev| decode_case(&mut out, ev));
    out.push_str("    default: return 0;\n    }\n}\n\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
    out
}
