//! Go stubs: a package with an encoder per event and a decoder.

use super::{args, camel, header};
use crate::spec::{FieldType, Scalar, Spec};
use std::fmt::Write;

fn gotype(s: Scalar) -> &'static str {
    match s {
        Scalar::U8 => "uint8",
        Scalar::U16 => "uint16",
        Scalar::U32 => "uint32",
        Scalar::U64 => "uint64",
        Scalar::I8 => "int8",
        Scalar::I16 => "int16",
        Scalar::I32 => "int32",
        Scalar::I64 => "int64",
        Scalar::F64 => "float64",
    }
}

fn bits(s: Scalar, v: &str) -> String {
    match s {
        Scalar::F64 => format!("math.Float64bits({v})"),
        _ => format!("uint64({v})"),
    }
}

fn from_bits(s: Scalar, v: &str) -> String {
    match s {
        Scalar::F64 => format!("math.Float64frombits({v})"),
        s if s.signed() => format!("{}(int64({v}))", gotype(s)),
        s => format!("{}({v})", gotype(s)),
    }
}

pub fn gen(spec: &Spec, pkg: &str) -> String {
    let mut out = header(spec, "//");
    let _ = write!(
        out,
        "
// Package {pkg} encodes and decodes the events of this spec in loupe-trace's record format.
package {pkg}

import (
\t\"encoding/binary\"
\t\"fmt\"
\t\"math\"
)

const (
\tMaxString = 1024
\tMaxList   = 128
)

func put(b []byte, v uint64, n int) []byte {{
\tfor i := 0; i < n; i++ {{
\t\tb = append(b, byte(v>>(8*i)))
\t}}
\treturn b
}}

func putStr(b []byte, s string) []byte {{
\tif len(s) > MaxString {{
\t\ts = s[:MaxString]
\t}}
\treturn append(put(b, uint64(len(s)), 2), s...)
}}

func finish(b []byte, id uint16) []byte {{
\tfor len(b)%8 != 0 {{
\t\tb = append(b, 0)
\t}}
\tbinary.LittleEndian.PutUint16(b[8:], uint16(len(b)))
\tbinary.LittleEndian.PutUint16(b[10:], id)
\treturn b
}}

type reader struct {{
\tb   []byte
\tp   int
\terr error
}}

func (r *reader) get(n int) uint64 {{
\tif r.p+n > len(r.b) {{
\t\tr.err = fmt.Errorf(\"record overrun at byte %d\", r.p)
\t\treturn 0
\t}}
\tvar v uint64
\tfor i := 0; i < n; i++ {{
\t\tv |= uint64(r.b[r.p+i]) << (8 * i)
\t}}
\tr.p += n
\treturn v
}}

func (r *reader) str() string {{
\tn := int(r.get(2))
\tif r.err != nil || r.p+n > len(r.b) {{
\t\tr.err = fmt.Errorf(\"string overrun\")
\t\treturn \"\"
\t}}
\ts := string(r.b[r.p : r.p+n])
\tr.p += n
\treturn s
}}
"
    );
    let mut names = String::new();
    let mut cases = String::new();
    for ev in &spec.events {
        let name = camel(&ev.snake_name());
        let a = args(ev);
        let params: Vec<String> = a
            .iter()
            .map(|(n, f)| match f.ty {
                FieldType::Scalar(s) => format!("{} {}", lc(n), gotype(s)),
                FieldType::String => format!("{} string", lc(n)),
                FieldType::List(s) => format!("{} []{}", lc(n), gotype(s)),
            })
            .collect();
        let _ = writeln!(out, "\n// Id{name} is the event id of {}.\nconst Id{name} = {}\n", ev.full_name(), ev.id);
        let _ = writeln!(
            out,
            "// Encode{name} encodes {}: {}",
            ev.full_name(),
            ev.description.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        let _ = writeln!(out, "func Encode{name}(ts uint64{}) []byte {{", params.iter().map(|p| format!(", {p}")).collect::<String>());
        out.push_str("\tb := put(make([]byte, 0, 64), ts, 8)\n\tb = append(b, 0, 0, 0, 0)\n");
        let _ = writeln!(cases, "\tcase {}:", ev.id);
        let mut call = Vec::new();
        for (n, f) in &a {
            let v = lc(n);
            match f.ty {
                FieldType::Scalar(s) => {
                    let _ = writeln!(out, "\tb = put(b, {}, {})", bits(s, &v), s.size());
                    let _ = writeln!(cases, "\t\t{v} := {}", from_bits(s, &format!("r.get({})", s.size())));
                }
                FieldType::String => {
                    let _ = writeln!(out, "\tb = putStr(b, {v})");
                    let _ = writeln!(cases, "\t\t{v} := r.str()");
                }
                FieldType::List(s) => {
                    let _ = writeln!(out, "\tif len({v}) > MaxList {{\n\t\t{v} = {v}[:MaxList]\n\t}}\n\tb = put(b, uint64(len({v})), 2)");
                    let _ = writeln!(out, "\tfor _, x := range {v} {{\n\t\tb = put(b, {}, {})\n\t}}", bits(s, "x"), s.size());
                    let _ = writeln!(cases, "\t\t{v} := make([]{}, r.get(2))", gotype(s));
                    let _ = writeln!(
                        cases,
                        "\t\tfor i := range {v} {{\n\t\t\t{v}[i] = {}\n\t\t}}",
                        from_bits(s, &format!("r.get({})", s.size()))
                    );
                }
            }
            call.push(v);
        }
        let _ = writeln!(out, "\treturn finish(b, {})\n}}", ev.id);
        let _ = writeln!(cases, "\t\tfields = []any{{{}}}", call.join(", "));
        let _ = writeln!(
            cases,
            "\t\tenc = func() []byte {{ return Encode{name}(ts{}) }}",
            call.iter().map(|c| format!(", {c}")).collect::<String>()
        );
        let _ = writeln!(names, "\t{}: \"{}\",", ev.id, ev.full_name());
    }
    let _ = write!(
        out,
        "
// EventNames maps event ids to their names.
var EventNames = map[uint16]string{{
{names}}}

// Decode decodes one record into its event id, timestamp and field values,
// and returns a function that encodes them again through the typed encoder.
func Decode(rec []byte) (id uint16, ts uint64, fields []any, reencode func() []byte, err error) {{
\tif len(rec) < 12 {{
\t\treturn 0, 0, nil, nil, fmt.Errorf(\"short record\")
\t}}
\tts = binary.LittleEndian.Uint64(rec)
\tsize := int(binary.LittleEndian.Uint16(rec[8:]))
\tid = binary.LittleEndian.Uint16(rec[10:])
\tif size > len(rec) {{
\t\treturn 0, 0, nil, nil, fmt.Errorf(\"record size %d exceeds %d bytes\", size, len(rec))
\t}}
\tr := &reader{{b: rec[:size], p: 12}}
\tvar enc func() []byte
\tswitch id {{
{cases}\tdefault:
\t\treturn id, ts, nil, nil, fmt.Errorf(\"unknown event id %d\", id)
\t}}
\treturn id, ts, fields, enc, r.err
}}
"
    );
    out
}

/// Go parameter names: the snake name, with Go keywords avoided.
fn lc(n: &str) -> String {
    match n {
        "type" | "func" | "range" | "map" | "go" | "var" | "len" => format!("{n}_"),
        _ => n.to_string(),
    }
}
