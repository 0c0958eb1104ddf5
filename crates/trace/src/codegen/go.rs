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
\t\"os\"
\t\"runtime\"
\t\"sync\"
\t\"sync/atomic\"
\t\"syscall\"
\t\"unsafe\"
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

// The writer side of loupe-trace's per-CPU shared-memory buffer (the same
// protocol as sdk/c/loupe_trace.h): reserve with a CAS on the CPU's head,
// reading CLOCK_MONOTONIC inside every attempt; drop and count when full.
type shm struct {{
\tb                                []byte
\tncpu, nsub, sub, stride, dataOff uint64
}}

var (
\tbufOnce sync.Once
\tbuf     *shm
)

func attach() *shm {{
\tbufOnce.Do(func() {{
\t\tpath := os.Getenv(\"LOUPE_TRACE_SHM\")
\t\tif path == \"\" {{
\t\t\treturn
\t\t}}
\t\tf, err := os.OpenFile(path, os.O_RDWR, 0)
\t\tif err != nil {{
\t\t\treturn
\t\t}}
\t\tdefer f.Close()
\t\tst, err := f.Stat()
\t\tif err != nil || st.Size() < 4096 {{
\t\t\treturn
\t\t}}
\t\tb, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
\t\tif err != nil {{
\t\t\treturn
\t\t}}
\t\tle := binary.LittleEndian
\t\tif atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[0]))) != 0x4352544550554f4c || le.Uint32(b[8:]) != 1 {{
\t\t\t_ = syscall.Munmap(b)
\t\t\treturn
\t\t}}
\t\tbuf = &shm{{b: b, ncpu: uint64(le.Uint32(b[12:])), nsub: uint64(le.Uint32(b[16:])), sub: uint64(le.Uint32(b[20:])),
\t\t\tstride: uint64(le.Uint32(b[28:])), dataOff: le.Uint64(b[40:])}}
\t}})
\treturn buf
}}

// Enabled reports whether events go anywhere ($LOUPE_TRACE_SHM names a buffer).
func Enabled() bool {{ return attach() != nil }}

// monotonic reads CLOCK_MONOTONIC, the clock of every other layer of the trace.
func monotonic() uint64 {{
\tvar ts syscall.Timespec
\tsyscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
\treturn uint64(ts.Sec)*1000000000 + uint64(ts.Nsec)
}}

// getcpu(2) numbers; the package syscall does not name it. Elsewhere every
// event goes to CPU 0's buffer (correct, only more contended).
var sysGetcpu = map[string]uintptr{{\"amd64\": 309, \"arm64\": 168, \"riscv64\": 168}}[runtime.GOARCH]

func getcpu() uint64 {{
\tvar c uint32
\tif sysGetcpu != 0 {{
\t\tsyscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&c)), 0, 0)
\t}}
\treturn uint64(c)
}}

func (s *shm) ctl(cpu, off uint64) *uint64 {{
\treturn (*uint64)(unsafe.Pointer(&s.b[4096+cpu*s.stride+off]))
}}

func (s *shm) at(cpu, pos, n uint64) []byte {{
\tslot := (pos / s.sub) % s.nsub
\to := s.dataOff + (cpu*s.nsub+slot)*s.sub + pos%s.sub
\treturn s.b[o : o+n]
}}

func (s *shm) commit(cpu, pos, n uint64) {{
\tatomic.AddUint64(s.ctl(cpu, 192+8*((pos/s.sub)%s.nsub)), n)
}}

// write logs an encoded record; its timestamp is set by the reservation.
func (s *shm) write(rec []byte) bool {{
\tn := uint64(len(rec))
\tcpu := getcpu() % s.ncpu
\thead := s.ctl(cpu, 0)
\tvar h, ts, pos, start uint64
\tvar fresh bool
\tfor {{
\t\th = atomic.LoadUint64(head)
\t\tts = monotonic()
\t\toff := h % s.sub
\t\tfresh = off == 0 || off+n > s.sub
\t\tif fresh {{
\t\t\tstart = (h + s.sub - 1) / s.sub * s.sub
\t\t\tif start/s.sub >= atomic.LoadUint64(s.ctl(cpu, 128))+s.nsub {{
\t\t\t\tatomic.AddUint64(s.ctl(cpu, 64), 1)
\t\t\t\treturn false
\t\t\t}}
\t\t\tpos = start + 64
\t\t}} else {{
\t\t\tpos = h
\t\t}}
\t\tif atomic.CompareAndSwapUint64(head, h, pos+n) {{
\t\t\tbreak
\t\t}}
\t}}
\tbinary.LittleEndian.PutUint64(rec, ts)
\tcopy(s.at(cpu, pos, n), rec)
\tmine := n
\tif fresh {{
\t\thdr := s.at(cpu, start, 64)
\t\tfor i := range hdr {{
\t\t\thdr[i] = 0
\t\t}}
\t\tle := binary.LittleEndian
\t\tle.PutUint32(hdr[0:], 0xC1FC1FC1)
\t\tle.PutUint32(hdr[8:], uint32(cpu))
\t\tle.PutUint32(hdr[12:], uint32(cpu))
\t\tle.PutUint64(hdr[16:], ts)
\t\tle.PutUint64(hdr[48:], start/s.sub)
\t\tle.PutUint64(hdr[56:], atomic.LoadUint64(s.ctl(cpu, 64)))
\t\tmine += 64
\t\tif off := h % s.sub; off != 0 {{
\t\t\ttail := s.at(cpu, h, s.sub-off)
\t\t\tfor i := range tail {{
\t\t\t\ttail[i] = 0
\t\t\t}}
\t\t\ts.commit(cpu, h, s.sub-off)
\t\t}}
\t}}
\ts.commit(cpu, pos, mine)
\treturn true
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
        let _ = writeln!(out, "\n// {name} logs {} into the trace buffer, if tracing is on.", ev.full_name());
        let _ = writeln!(out, "func {name}({}) {{\n\tif s := attach(); s != nil {{", params.join(", "));
        let _ =
            writeln!(out, "\t\ts.write(Encode{name}(0{}))\n\t}}\n}}", a.iter().map(|(n, _)| format!(", {}", lc(n))).collect::<String>());
        let _ = writeln!(cases, "\t\tfields = []any{{{}}}", call.join(", "));
        let _ = writeln!(
            cases,
            "\t\tenc = func() []byte {{ return Encode{name}(ts{}) }}",
            call.iter().map(|c| format!(", {c}")).collect::<String>()
        );
        let _ = writeln!(names, "\tcase {}:\n\t\treturn \"{}\"", ev.id, ev.full_name());
    }
    let _ = write!(
        out,
        "
// EventName returns the name of an event id, or \"\".
func EventName(id uint16) string {{
\tswitch id {{
{names}\t}}
\treturn \"\"
}}

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
