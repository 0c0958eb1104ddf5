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
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** Encoders and a decoder for the events of this spec, in loupe-trace's record format. */
public final class {class} {{
    public static final int MAX_STRING = 1024;
    public static final int MAX_LIST = 128;

    private {class}() {{}}

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
