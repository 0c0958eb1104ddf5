//! Python stubs: pure `struct` encoding and decoding.

use super::{args, header};
use crate::spec::{FieldType, Scalar, Spec};
use std::fmt::Write;

fn fmt(s: Scalar) -> &'static str {
    match s {
        Scalar::U8 => "B",
        Scalar::U16 => "H",
        Scalar::U32 => "I",
        Scalar::U64 => "Q",
        Scalar::I8 => "b",
        Scalar::I16 => "h",
        Scalar::I32 => "i",
        Scalar::I64 => "q",
        Scalar::F64 => "d",
    }
}

pub fn gen(spec: &Spec) -> String {
    let mut out = header(spec, "#");
    out.push_str(
        "\"\"\"Encoders, loggers and a decoder for the events of this spec (the bytes of loupe-trace's record format).
trace_<event>(...) logs into the buffer of `loupe trace record` through the runtime loupe_trace.py (sdk/python),
which must sit beside this module; without it, or outside a recording, they do nothing.\"\"\"
import struct

try:
    import loupe_trace as _rt
except ImportError:
    _rt = None

MAX_STRING = 1024
MAX_LIST = 128


def _wrap(fmt, v):
    # Values are cut to their wire width like a C cast.
    if fmt == 'd':
        return float(v)
    bits = struct.calcsize(fmt) * 8
    v = int(v) & ((1 << bits) - 1)
    if fmt.islower() and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _scalar(parts, fmt, v):
    parts.append(struct.pack('<' + fmt, _wrap(fmt, v)))


def _string(parts, s):
    b = s.encode('utf-8')[:MAX_STRING]
    parts.append(struct.pack('<H', len(b)) + b)


def _list(parts, fmt, items):
    items = list(items)[:MAX_LIST]
    parts.append(struct.pack('<H%d%s' % (len(items), fmt), len(items), *[_wrap(fmt, v) for v in items]))


def _finish(ts, ev_id, parts):
    body = b''.join(parts)
    size = (12 + len(body) + 7) & ~7
    return struct.pack('<QHH', ts, size, ev_id) + body + bytes(size - 12 - len(body))


class _Reader:
    def __init__(self, rec):
        self.rec, self.pos = rec, 12

    def scalar(self, fmt):
        (v,) = struct.unpack_from('<' + fmt, self.rec, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.scalar('H')
        s = self.rec[self.pos:self.pos + n].decode('utf-8', 'replace')
        self.pos += n
        return s

    def list(self, fmt):
        return [self.scalar(fmt) for _ in range(self.scalar('H'))]

",
    );
    let mut table = String::new();
    for ev in &spec.events {
        let sn = ev.snake_name();
        let a = args(ev);
        let params: String = a.iter().map(|(n, _)| format!(", {n}")).collect();
        let _ = writeln!(out, "\nID_{} = {}\n", sn.to_uppercase(), ev.id);
        let _ = writeln!(out, "\ndef encode_{sn}(ts{params}):\n    \"\"\"{}: {}\"\"\"\n    parts = []", ev.full_name(), ev.description);
        let mut readers = Vec::new();
        for (n, f) in &a {
            let (w, r) = match f.ty {
                FieldType::Scalar(s) => (format!("_scalar(parts, '{}', {n})", fmt(s)), format!("r.scalar('{}')", fmt(s))),
                FieldType::String => (format!("_string(parts, {n})"), "r.string()".into()),
                FieldType::List(s) => (format!("_list(parts, '{}', {n})", fmt(s)), format!("r.list('{}')", fmt(s))),
            };
            let _ = writeln!(out, "    {w}");
            readers.push(format!("('{}', {r})", f.name));
        }
        let _ = writeln!(out, "    return _finish(ts, {}, parts)\n", ev.id);
        let _ = writeln!(out, "\ndef _decode_{sn}(r):\n    return [{}]\n", readers.join(", "));
        let _ = writeln!(
            out,
            "\ndef trace_{sn}({}):\n    \"\"\"Logs {} (see encode_{sn}).\"\"\"\n    if _rt is not None and _rt.enabled():\n        _rt.write(encode_{sn}(0{params}))\n",
            params.trim_start_matches(", "),
            ev.full_name()
        );
        let _ = writeln!(table, "    {}: ('{}', _decode_{sn}, encode_{sn}),", ev.id, ev.full_name());
    }
    let _ = write!(
        out,
        "\n_EVENTS = {{\n{table}}}


def decode(rec):
    \"\"\"Decodes one record: (event name, timestamp, [(field, value)], size).\"\"\"
    ts, size, ev_id = struct.unpack_from('<QHH', rec, 0)
    if ev_id not in _EVENTS:
        raise ValueError('unknown event id %d' % ev_id)
    name, dec, _ = _EVENTS[ev_id]
    return name, ts, dec(_Reader(rec[:size])), size


def reencode(rec):
    \"\"\"Decodes a record and encodes it again through the typed encoder.\"\"\"
    name, ts, fields, _ = decode(rec)
    _, _, enc = _EVENTS[struct.unpack_from('<H', rec, 10)[0]]
    return enc(ts, *[v for _, v in fields])
"
    );
    out
}
