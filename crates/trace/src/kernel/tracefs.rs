//! Kernel tracepoints as perf sees them: the event id perf_event_open takes
//! as `config` and the byte layout of the raw record, both read from tracefs
//! (`events/<system>/<name>/{id,format}`). Field offsets are taken from the
//! format file rather than assumed, since they change between kernels.

use std::io;
use std::path::{Path, PathBuf};

/// Where tracefs is (mounting it at /sys/kernel/tracing if nothing is, as root may).
pub fn root() -> io::Result<PathBuf> {
    let known = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
    if let Some(p) = known.iter().map(PathBuf::from).find(|p| p.join("events").is_dir()) {
        return Ok(p);
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: mount(2) with NUL-terminated static strings and no data.
    let rc = unsafe { libc::mount(c"tracefs".as_ptr(), target.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("tracefs is not mounted and mounting it failed: {e}")));
    }
    Ok(PathBuf::from("/sys/kernel/tracing"))
}

/// A field of a tracepoint's raw record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
}

impl Field {
    /// The field as a little-endian unsigned integer (None if the record is short).
    pub fn uint(&self, raw: &[u8]) -> Option<u64> {
        let b = raw.get(self.offset..self.offset + self.size.min(8))?;
        let mut v = [0u8; 8];
        v[..b.len()].copy_from_slice(b);
        Some(u64::from_le_bytes(v))
    }

    /// A fixed `char[N]` field up to its first NUL.
    pub fn text(&self, raw: &[u8]) -> Option<String> {
        let b = raw.get(self.offset..self.offset + self.size)?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

/// One tracepoint: its perf config and the fields asked for, in order.
#[derive(Clone, Debug)]
pub struct Tracepoint {
    pub id: u64,
    pub fields: Vec<Field>,
}

/// Looks up `system:name` and the offsets of `fields` under tracefs `root`.
pub fn lookup(root: &Path, system: &str, name: &str, fields: &[&str]) -> io::Result<Tracepoint> {
    let dir = root.join("events").join(system).join(name);
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, format!("{system}:{name}: {what}"));
    let id = std::fs::read_to_string(dir.join("id"))?.trim().parse().map_err(|_| bad("unreadable id".into()))?;
    let format = std::fs::read_to_string(dir.join("format"))?;
    let fields = fields.iter().map(|f| parse_field(&format, f).ok_or_else(|| bad(format!("no field {f}")))).collect::<io::Result<_>>()?;
    Ok(Tracepoint { id, fields })
}

/// Finds `field:<type> <name>[..];` followed by `offset:N;` and `size:M;` in a format file.
fn parse_field(format: &str, name: &str) -> Option<Field> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?.split(';').next()?;
        let last = decl.split_whitespace().last()?;
        if last.split('[').next()? != name {
            return None;
        }
        let num = |key: &str| line.split(key).nth(1)?.split(';').next()?.trim().parse().ok();
        Some(Field { offset: num("offset:")?, size: num("size:")? })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHED_SWITCH: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
";

    // Offsets and sizes come from the format text, arrays by their base name; a missing field is None.
    #[test]
    fn parses_format_fields() {
        assert_eq!(parse_field(SCHED_SWITCH, "prev_pid"), Some(Field { offset: 24, size: 4 }));
        assert_eq!(parse_field(SCHED_SWITCH, "next_comm"), Some(Field { offset: 40, size: 16 }));
        assert_eq!(parse_field(SCHED_SWITCH, "prev_state"), Some(Field { offset: 32, size: 8 }));
        assert_eq!(parse_field(SCHED_SWITCH, "prev"), None);
    }

    // Integer fields are little-endian of their size; text stops at NUL; short records give None.
    #[test]
    fn reads_fields() {
        let mut raw = vec![0u8; 24];
        raw[8..12].copy_from_slice(&0x1234u32.to_le_bytes());
        raw[12..16].copy_from_slice(b"sh\0x");
        assert_eq!(Field { offset: 8, size: 4 }.uint(&raw), Some(0x1234));
        assert_eq!(Field { offset: 12, size: 4 }.text(&raw), Some("sh".into()));
        assert_eq!(Field { offset: 20, size: 8 }.uint(&raw), None);
    }
}
