//! C (and C++) header-only stubs over `sdk/c/loupe_trace.h`.

use super::{args, header};
use crate::record::{max_size, HEADER, MAX_LIST, MAX_STRING};
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

/// The fill function's parameters: each string and list passes its clamped length.
fn fill_params(ev: &Event) -> String {
    let mut p = vec!["uint8_t *p_".to_string(), "uint32_t size_".to_string()];
    for (n, f) in args(ev) {
        match f.ty {
            FieldType::Scalar(s) => p.push(format!("{} {n}", ctype(s))),
            FieldType::String => p.push(format!("const char *{n}, uint16_t {n}_n")),
            FieldType::List(s) => p.push(format!("const {} *{n}, uint16_t {n}_n", ctype(s))),
        }
    }
    p.join(", ")
}

fn fill_args(ev: &Event) -> String {
    let mut p = Vec::new();
    for (n, f) in args(ev) {
        match f.ty {
            FieldType::Scalar(_) => p.push(n),
            _ => p.push(format!("{n}, {n}_n")),
        }
    }
    p.join(", ")
}

/// The fixed part of a record (header, scalars, length prefixes) and, when
/// every field is a scalar, nothing else: then the size is a constant.
fn fixed_size(ev: &Event) -> (usize, bool) {
    let mut n = HEADER;
    let mut fixed = true;
    for f in &ev.fields {
        match f.ty {
            FieldType::Scalar(s) => n += s.size(),
            FieldType::String | FieldType::List(_) => (n, fixed) = (n + 2, false),
        }
    }
    (n, fixed)
}

/// Statements computing the clamped lengths and `size` (a constant for fixed-size events).
fn size_lines(ev: &Event) -> String {
    let (base, fixed) = fixed_size(ev);
    if fixed {
        return format!("    const uint32_t size_ = {};\n", base.next_multiple_of(8));
    }
    let mut out = String::new();
    let mut var = Vec::new();
    for (n, f) in args(ev) {
        match f.ty {
            FieldType::String => {
                let _ = writeln!(out, "    const uint16_t {n}_n = loupe_strn({n});");
                var.push(format!("{n}_n"));
            }
            FieldType::List(s) => {
                let _ = writeln!(out, "    const uint16_t {n}_n = loupe_listn({n}_len);");
                var.push(if s.size() == 1 { format!("{n}_n") } else { format!("{n}_n * {}u", s.size()) });
            }
            FieldType::Scalar(_) => {}
        }
    }
    let _ = writeln!(out, "    const uint32_t size_ = ({base}u + {} + 7u) & ~7u;", var.join(" + "));
    out
}

/// The record after its timestamp, written in place: padding first (one
/// store, which the fields then overwrite where they reach), size and id in
/// one store, scalars at constant offsets up to the first string or list.
fn fill(out: &mut String, ev: &Event) {
    let sn = ev.snake_name();
    let (base, fixed) = fixed_size(ev);
    let _ = writeln!(out, "static inline void trace_fill_{sn}({}) {{", fill_params(ev));
    if !(fixed && base.is_multiple_of(8)) {
        out.push_str("    loupe_pad(p_, size_);\n");
    }
    let _ = writeln!(out, "    loupe_tag(p_, size_, {});", ev.id);
    let mut at = Some(HEADER); // constant offset until the first variable-length field
    let last = ev.fields.len().saturating_sub(1);
    for (i, (n, f)) in args(ev).into_iter().enumerate() {
        let dst = match at {
            Some(o) => format!("p_ + {o}"),
            None => "q_".to_string(),
        };
        let line = match f.ty {
            FieldType::Scalar(s) => {
                let line = format!("memcpy({dst}, &{n}, {});", s.size());
                match at.as_mut() {
                    Some(o) => *o += s.size(),
                    None if i < last => {
                        let _ = writeln!(out, "    {line} q_ += {};", s.size());
                        continue;
                    }
                    None => {}
                }
                line
            }
            FieldType::String | FieldType::List(_) => {
                let bytes = match f.ty {
                    FieldType::List(s) if s.size() > 1 => format!("{n}_n * {}u", s.size()),
                    _ => format!("{n}_n"),
                };
                let data = match at {
                    Some(o) => format!("p_ + {}", o + 2),
                    None => "q_ + 2".to_string(),
                };
                let head = format!("memcpy({dst}, &{n}_n, 2); memcpy({data}, {n}, {bytes});");
                if i == last {
                    head
                } else {
                    let q = match at {
                        Some(o) => format!("uint8_t *q_ = p_ + {} + {bytes};", o + 2),
                        None => format!("q_ += 2 + {bytes};"),
                    };
                    at = None;
                    format!("{head}\n    {q}")
                }
            }
        };
        let _ = writeln!(out, "    {line}");
    }
    out.push_str("}\n");
}

fn event(out: &mut String, ev: &Event) {
    let sn = ev.snake_name();
    let up = sn.to_uppercase();
    let _ = writeln!(out, "/* {}: {} */", ev.full_name(), ev.description.replace("*/", "* /"));
    let _ = writeln!(out, "#define TRACE_ID_{up} {}\n#define TRACE_MAX_{up} {}", ev.id, max_size(ev));
    fill(out, ev);
    let fa = comma(fill_args(ev));
    let _ = writeln!(out, "static inline uint32_t trace_encode_{sn}(uint8_t *rec, uint64_t ts{}) {{", comma(params(ev)));
    out.push_str(&size_lines(ev));
    let _ = writeln!(out, "    memcpy(rec, &ts, 8);\n    trace_fill_{sn}(rec, size_{fa});\n    return size_;\n}}");
    let _ = writeln!(out, "static inline void trace_{sn}({}) {{", if ev.fields.is_empty() { "void".into() } else { params(ev) });
    out.push_str("    if (!loupe_trace_on()) return;\n");
    out.push_str(&size_lines(ev));
    out.push_str("    struct loupe_resv r_ = loupe_reserve(size_);\n    if (__builtin_expect(r_.p == 0, 0)) return;\n");
    let _ = writeln!(out, "    trace_fill_{sn}(r_.p, size_{fa});\n    loupe_publish(r_, size_);\n}}\n");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fields: &str) -> Spec {
        crate::spec::parse(&[(
            "f.xml",
            &format!(
                "<events name='t'><event name='A::B::C' description='d'><layerId value='A'/><classId value='B'/>
                 <specifier value='C'/><fields>{fields}</fields></event></events>"
            ),
        )])
        .unwrap()
    }

    // Scalar-only events log with a constant size (12 + 4 + 8 = 24, no padding store); a u16 alone pads 14 to 16.
    #[test]
    fn fixed_events_have_constant_size() {
        let t = gen(&spec("<field name='a' type='uint32' description='d'/><field name='b' type='uint64' description='d'/>"));
        assert!(t.contains("const uint32_t size_ = 24;"));
        assert!(!t.contains("loupe_pad("), "{t}");
        assert!(t.contains("memcpy(p_ + 12, &a, 4);\n    memcpy(p_ + 16, &b, 8);"));
        let t = gen(&spec("<field name='a' type='uint16' description='d'/>"));
        assert!(t.contains("const uint32_t size_ = 16;") && t.contains("loupe_pad(p_, size_);"));
    }

    // After a string the fields follow a running pointer; the size adds the clamped lengths (4-byte list elements).
    #[test]
    fn variable_events_compute_size_from_lengths() {
        let t = gen(&spec(
            "<field name='s' type='string' description='d'/><field name='l' type='list' eltType='int32' description='d'/>
             <field name='x' type='uint8' description='d'/>",
        ));
        assert!(t.contains("const uint32_t size_ = (17u + s_n + l_n * 4u + 7u) & ~7u;"), "{t}");
        assert!(t.contains("memcpy(p_ + 12, &s_n, 2); memcpy(p_ + 14, s, s_n);\n    uint8_t *q_ = p_ + 14 + s_n;"));
        assert!(t.contains("memcpy(q_, &l_n, 2); memcpy(q_ + 2, l, l_n * 4u);\n    q_ += 2 + l_n * 4u;\n    memcpy(q_, &x, 1);\n"));
    }
}
