//! Java stubs: one class with an encoder per event and a decoder. Integers
//! of every width are passed as `long` (their bits are what goes on the wire).

use super::{args, camel, header};
use crate::spec::{FieldType, Scalar, Spec};
use std::fmt::Write;

fn jtype(s: Scalar) -> &'static str {
    if s == Scalar::F64 {
        "double"
    } else {
        "long"
    }
}

fn lower_camel(s: &str) -> String {
    let c = camel(s);
    c[..1].to_lowercase() + &c[1..]
}

pub fn gen(spec: &Spec, class: &str) -> String {
    let mut out = header(spec, "//");
    let _ = write!(
        out,
        "
import java.io.RandomAccessFile;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** Encoders and a decoder for the events of this spec, in loupe-trace's record format. */
public final class {class} {{
    public static final int MAX_STRING = 1024;
    public static final int MAX_LIST = 128;

    private {class}() {{}}

    // The writer side of loupe-trace's per-CPU shared-memory buffer (the protocol of
    // sdk/c/loupe_trace.h): a CAS on the CPU's head reserves space, System.nanoTime()
    // (CLOCK_MONOTONIC on Linux) is read inside every attempt, a full buffer drops and counts.
    // Java cannot ask which CPU it runs on; threads pick a buffer by id, which the protocol allows.
    private static final VarHandle LONGS = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    private static final class Shm {{
        final ByteBuffer b;
        final long ncpu, nsub, sub, stride, data;

        Shm(ByteBuffer b) {{
            this.b = b;
            ncpu = b.getInt(12);
            nsub = b.getInt(16);
            sub = b.getInt(20);
            stride = b.getInt(28);
            data = b.getLong(40);
        }}

        int ctl(long cpu, long off) {{ return (int) (4096 + cpu * stride + off); }}

        int at(long cpu, long pos) {{ return (int) (data + (cpu * nsub + (pos / sub) % nsub) * sub + pos % sub); }}

        void commit(long cpu, long pos, long n) {{ LONGS.getAndAdd(b, ctl(cpu, 192 + 8 * ((pos / sub) % nsub)), n); }}
    }}

    private static final Shm SHM = attach();

    private static Shm attach() {{
        String path = System.getenv(\"LOUPE_TRACE_SHM\");
        if (path == null) return null;
        try (RandomAccessFile f = new RandomAccessFile(path, \"rw\"); FileChannel ch = f.getChannel()) {{
            ByteBuffer m = ch.map(FileChannel.MapMode.READ_WRITE, 0, ch.size()).order(ByteOrder.LITTLE_ENDIAN);
            if ((long) LONGS.getAcquire(m, 0) != 0x4352544550554f4cL || m.getInt(8) != 1) return null;
            return new Shm(m);
        }} catch (Exception e) {{
            return null;
        }}
    }}

    /** Whether events go anywhere ($LOUPE_TRACE_SHM names a buffer). */
    public static boolean enabled() {{ return SHM != null; }}

    private static boolean write(byte[] rec) {{
        Shm s = SHM;
        long n = rec.length, cpu = Thread.currentThread().getId() % s.ncpu, h, ts, pos, start = 0;
        int head = s.ctl(cpu, 0);
        boolean fresh;
        while (true) {{
            h = (long) LONGS.getAcquire(s.b, head);
            ts = System.nanoTime();
            long off = h % s.sub;
            fresh = off == 0 || off + n > s.sub;
            if (fresh) {{
                start = (h + s.sub - 1) / s.sub * s.sub;
                if (start / s.sub >= (long) LONGS.getAcquire(s.b, s.ctl(cpu, 128)) + s.nsub) {{
                    LONGS.getAndAdd(s.b, s.ctl(cpu, 64), 1L);
                    return false;
                }}
                pos = start + 64;
            }} else {{
                pos = h;
            }}
            if (LONGS.compareAndSet(s.b, head, h, pos + n)) break;
        }}
        for (int i = 0; i < 8; i++) rec[i] = (byte) (ts >>> (8 * i));
        s.b.put(s.at(cpu, pos), rec);
        long mine = n;
        if (fresh) {{
            int p = s.at(cpu, start);
            s.b.put(p, new byte[64]);
            s.b.putInt(p, 0xC1FC1FC1);
            s.b.putInt(p + 8, (int) cpu);
            s.b.putInt(p + 12, (int) cpu);
            s.b.putLong(p + 16, ts);
            s.b.putLong(p + 48, start / s.sub);
            s.b.putLong(p + 56, (long) LONGS.getAcquire(s.b, s.ctl(cpu, 64)));
            mine += 64;
            long off = h % s.sub;
            if (off != 0) {{
                s.b.put(s.at(cpu, h), new byte[(int) (s.sub - off)]);
                s.commit(cpu, h, s.sub - off);
            }}
        }}
        s.commit(cpu, pos, mine);
        return true;
    }}

    private static final class W {{
        byte[] b = new byte[64];
        int n;

        void put(long v, int k) {{
            if (n + k > b.length) b = Arrays.copyOf(b, Math.max(b.length * 2, n + k));
            for (int i = 0; i < k; i++) b[n++] = (byte) (v >>> (8 * i));
        }}

        void str(String s) {{
            byte[] u = s.getBytes(StandardCharsets.UTF_8);
            int len = Math.min(u.length, MAX_STRING);
            put(len, 2);
            for (int i = 0; i < len; i++) put(u[i], 1);
        }}

        byte[] finish(int id) {{
            while (n % 8 != 0) put(0, 1);
            b[8] = (byte) n; b[9] = (byte) (n >>> 8);
            b[10] = (byte) id; b[11] = (byte) (id >>> 8);
            return Arrays.copyOf(b, n);
        }}
    }}

    private static final class R {{
        final byte[] b;
        int p = 12;

        R(byte[] b) {{ this.b = b; }}

        long get(int k, boolean signed) {{
            long v = 0;
            for (int i = 0; i < k; i++) v |= (b[p + i] & 0xffL) << (8 * i);
            p += k;
            if (signed && k < 8) v = (v << (64 - 8 * k)) >> (64 - 8 * k);
            return v;
        }}

        String str() {{
            int len = (int) get(2, false);
            String s = new String(b, p, len, StandardCharsets.UTF_8);
            p += len;
            return s;
        }}
    }}

    private static W start(long ts) {{
        W w = new W();
        w.put(ts, 8);
        w.put(0, 4);
        return w;
    }}
"
    );
    let mut names = String::new();
    let mut cases = String::new();
    for ev in &spec.events {
        let a = args(ev);
        let params: String = a
            .iter()
            .map(|(n, f)| match f.ty {
                FieldType::Scalar(s) => format!(", {} {}", jtype(s), lower_camel(n)),
                FieldType::String => format!(", String {}", lower_camel(n)),
                FieldType::List(s) => format!(", {}[] {}", jtype(s), lower_camel(n)),
            })
            .collect();
        let _ = writeln!(out, "\n    public static final int ID_{} = {};", ev.snake_name().to_uppercase(), ev.id);
        let _ = writeln!(out, "\n    /** {}: {} */", ev.full_name(), ev.description.split_whitespace().collect::<Vec<_>>().join(" "));
        let _ = writeln!(out, "    public static byte[] encode{}(long ts{params}) {{\n        W w = start(ts);", camel(&ev.snake_name()));
        let _ = writeln!(cases, "            case {}: {{", ev.id);
        let mut call = Vec::new();
        for (n, f) in &a {
            let v = lower_camel(n);
            match f.ty {
                FieldType::Scalar(s) => {
                    let b = if s == Scalar::F64 { format!("Double.doubleToRawLongBits({v})") } else { v.clone() };
                    let _ = writeln!(out, "        w.put({b}, {});", s.size());
                    let get = format!("r.get({}, {})", s.size(), s.signed());
                    let get = if s == Scalar::F64 { format!("Double.longBitsToDouble({get})") } else { get };
                    let _ = writeln!(cases, "                {} {v} = {get};", jtype(s));
                }
                FieldType::String => {
                    let _ = writeln!(out, "        w.str({v});");
                    let _ = writeln!(cases, "                String {v} = r.str();");
                }
                FieldType::List(s) => {
                    let b = if s == Scalar::F64 { "Double.doubleToRawLongBits(x)" } else { "x" };
                    let _ = writeln!(out, "        int {v}N = Math.min({v}.length, MAX_LIST);\n        w.put({v}N, 2);");
                    let _ =
                        writeln!(out, "        for (int i = 0; i < {v}N; i++) {{ {} x = {v}[i]; w.put({b}, {}); }}", jtype(s), s.size());
                    let get = format!("r.get({}, {})", s.size(), s.signed());
                    let get = if s == Scalar::F64 { format!("Double.longBitsToDouble({get})") } else { get };
                    let _ = writeln!(cases, "                {t}[] {v} = new {t}[(int) r.get(2, false)];", t = jtype(s));
                    let _ = writeln!(cases, "                for (int i = 0; i < {v}.length; i++) {v}[i] = {get};");
                }
            }
            call.push(v);
        }
        let _ = writeln!(out, "        return w.finish({});\n    }}", ev.id);
        let args: String = a.iter().map(|(n, _)| format!(", {}", lower_camel(n))).collect();
        let _ = writeln!(out, "\n    /** Logs {} into the trace buffer, if tracing is on. */", ev.full_name());
        let _ = writeln!(out, "    public static void {}({}) {{", lower_camel(&ev.snake_name()), params.trim_start_matches(", "));
        let _ = writeln!(out, "        if (SHM != null) write(encode{}(0{args}));\n    }}", camel(&ev.snake_name()));
        let _ = writeln!(
            cases,
            "                return encode{}(ts{});\n            }}",
            camel(&ev.snake_name()),
            call.iter().map(|c| format!(", {c}")).collect::<String>()
        );
        let _ = writeln!(names, "            case {}: return \"{}\";", ev.id, ev.full_name());
    }
    let _ = write!(
        out,
        "
    /** The event name of an id, or null. */
    public static String eventName(int id) {{
        switch (id) {{
{names}            default: return null;
        }}
    }}

    /** Decoder: decodes a record field by field and encodes it again through the typed encoder. */
    public static byte[] reencode(byte[] rec) {{
        R r = new R(rec);
        r.p = 0;
        long ts = r.get(8, false);
        int size = (int) r.get(2, false);
        int id = (int) r.get(2, false);
        if (size > rec.length) throw new IllegalArgumentException(\"record size \" + size + \" exceeds \" + rec.length);
        switch (id) {{
{cases}            default: throw new IllegalArgumentException(\"unknown event id \" + id);
        }}
    }}
}}
"
    );
    out
}
