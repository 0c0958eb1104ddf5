//! CTF 1.8 metadata (TSDL) for a spec. The buffer's packets are already CTF
//! packets (see [`crate::buffer`]): a packet header {magic, stream_id,
//! stream_instance_id = cpu} (without the instance id babeltrace2 takes all
//! files for one stream), a context {cpu_id, timestamp_begin, timestamp_end,
//! content_size, packet_size, packet_seq_num, events_discarded}, and events whose header is
//! {timestamp, size, id} aligned to 8 bytes, which skips each record's
//! zero padding. babeltrace2 warns about any header field without a role
//! (only `id` and `timestamp` have one), so the size is declared as a
//! struct whose one member is named `id`: it reads as an event id that the
//! real `id` right after it replaces. Strings are a u16 length and a UTF-8 byte sequence; lists a
//! u16 count and a sequence. Field names get a leading underscore, which CTF
//! readers strip, so that names such as `event` are not TSDL keywords. The
//! clock is CLOCK_MONOTONIC in nanoseconds, offset to the wall clock.

use crate::spec::{FieldType, Scalar, Spec};
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

const PRELUDE: &str = "/* CTF 1.8 */

typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
typealias integer { size = 8; align = 8; signed = true; } := int8_t;
typealias integer { size = 16; align = 8; signed = true; } := int16_t;
typealias integer { size = 32; align = 8; signed = true; } := int32_t;
typealias integer { size = 64; align = 8; signed = true; } := int64_t;
typealias integer { size = 8; align = 8; signed = false; encoding = UTF8; } := utf8_t;
typealias floating_point { exp_dig = 11; mant_dig = 53; align = 8; byte_order = le; } := double;

trace {
    major = 1;
    minor = 8;
    byte_order = le;
    packet.header := struct {
        uint32_t magic;
        uint32_t stream_id;
        uint32_t stream_instance_id;
    };
};

env {
    tracer_name = \"loupe\";
};

clock {
    name = \"monotonic\";
    description = \"CLOCK_MONOTONIC; offset: the wall clock when it read 0\";
    freq = 1000000000;
    offset_s = @OFFSET_S@;
    offset = @OFFSET_NS@;
    absolute = FALSE;
};

typealias integer { size = 64; align = 8; signed = false; map = clock.monotonic.value; } := uint64_clock_t;

stream {
    id = 0;
    packet.context := struct {
        uint32_t cpu_id;
        uint64_clock_t timestamp_begin;
        uint64_clock_t timestamp_end;
        uint64_t content_size;
        uint64_t packet_size;
        uint64_t packet_seq_num;
        uint64_t events_discarded;
    };
    event.header := struct {
        uint64_clock_t timestamp;
        struct { uint16_t id; } _size;
        uint16_t id;
    } align(64);
};
";

/// A `cpu` field: a CPU number, or all of them (u32::MAX: counters of a
/// whole process), which readers then name instead of printing 4294967295.
const CPU: &str = "enum : uint32_t { \"CPU\" = 0 ... 4294967294, \"all CPUs\" = 4294967295 }";

/// Sets a taken packet's content_size to the end of its last record's
/// fields, before that record's zero padding: CTF readers decode another
/// event header whenever content remains after an event, so the padding of
/// the last record must lie outside the content.
pub fn trim_content(spec: &Spec, p: &mut [u8]) {
    let Some(h) = crate::buffer::packet_header(p) else { return };
    let (mut at, mut last) = (crate::buffer::PACKET_HEADER, None);
    while at < h.content.min(p.len()) {
        let size = u16::from_le_bytes([p[at + 8], p[at + 9]]) as usize;
        if size == 0 {
            break;
        }
        last = Some(at);
        at += size;
    }
    if let Some(end) = last.and_then(|l| crate::record::unpadded_len(spec, p, l).map(|n| l + n)) {
        p[32..40].copy_from_slice(&(8 * end as u64).to_le_bytes());
    }
}

/// The `metadata` file of a CTF trace of `spec`, its clock without an
/// offset (times read as time since boot).
pub fn metadata(spec: &Spec) -> String {
    metadata_with_offset(spec, 0)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now, in nanoseconds: the clock
/// offset that makes a trace's monotonic times read as wall-clock times.
pub fn wall_clock_offset() -> u64 {
    let mut rt = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut rt) };
    let rt = rt.tv_sec as u64 * 1_000_000_000 + rt.tv_nsec as u64;
    rt.saturating_sub(crate::buffer::now())
}

/// The `metadata` file of a CTF trace of `spec` whose clock reads
/// `offset_ns` (see [`wall_clock_offset`]) plus its monotonic value.
pub fn metadata_with_offset(spec: &Spec, offset_ns: u64) -> String {
    let prelude = PRELUDE.replace("@OFFSET_S@", &(offset_ns / 1_000_000_000).to_string());
    let mut out = prelude.replace("@OFFSET_NS@", &(offset_ns % 1_000_000_000).to_string());
    for ev in &spec.events {
        let _ = writeln!(
            out,
            "\nevent {{\n    name = \"{}\";\n    id = {};\n    stream_id = 0;\n    fields := struct {{",
            ev.full_name(),
            ev.id
        );
        for f in &ev.fields {
            let n = &f.name;
            let _ = match f.ty {
                FieldType::Scalar(Scalar::U32) if n == "cpu" => writeln!(out, "        {CPU} _{n};"),
                FieldType::Scalar(s) => writeln!(out, "        {} _{n};", ctype(s)),
                FieldType::String => writeln!(out, "        uint16_t __{n}_len;\n        utf8_t _{n}[__{n}_len];"),
                FieldType::List(s) => writeln!(out, "        uint16_t __{n}_len;\n        {} _{n}[__{n}_len];", ctype(s)),
            };
        }
        out.push_str("    };\n};\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Strings and lists become a length field and a sequence; scalars map one to one.
    #[test]
    fn event_declarations() {
        let spec = crate::spec::parse(&[(
            "f.xml",
            "<events name='t'><event name='A::B::C' description='d'><layerId value='A'/><classId value='B'/>
             <specifier value='C'/><fields><field name='s' type='string' description='d'/>
             <field name='l' type='list' eltType='int32' description='d'/><field name='x' type='float64' description='d'/>
             </fields></event></events>",
        )])
        .unwrap();
        let m = metadata(&spec);
        assert!(m.contains(
            "name = \"A::B::C\";\n    id = 16;\n    stream_id = 0;\n    fields := struct {\n        uint16_t __s_len;\n        utf8_t _s[__s_len];\n        uint16_t __l_len;\n        int32_t _l[__l_len];\n        double _x;\n    };"
        ));
        assert!(m.starts_with("/* CTF 1.8 */"));
    }

    #[test]
    fn clock_offset_and_header_roles() {
        // Checks the clock offset split into seconds and nanoseconds, a size field that babeltrace2 gives a
        // role (a member named id), and a cpu field whose all-CPUs value has a name.
        let spec = crate::spec::parse(&[(
            "f.xml",
            "<events name='t'><event name='A::B::C' description='d'><layerId value='A'/><classId value='B'/>
             <specifier value='C'/><fields><field name='cpu' type='uint32' description='d'/></fields></event></events>",
        )])
        .unwrap();
        let m = metadata_with_offset(&spec, 1_795_759_217_123_456_789);
        assert!(m.contains("    offset_s = 1795759217;\n    offset = 123456789;\n"), "{m}");
        assert!(m.contains("uint64_clock_t timestamp;\n        struct { uint16_t id; } _size;\n        uint16_t id;\n"));
        assert!(m.contains("\"all CPUs\" = 4294967295 } _cpu;"));
        assert!(metadata(&spec).contains("    offset_s = 0;\n    offset = 0;\n"));
        let off = wall_clock_offset();
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert!(off + crate::buffer::now() <= unix + 60_000_000_000 && unix <= off + crate::buffer::now() + 60_000_000_000);
    }
}
