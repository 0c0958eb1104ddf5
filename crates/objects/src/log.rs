//! The allocation log: append-only files of fixed-layout records, one
//! directory per record database (`<db>/allocs/*.alog`).
//!
//! Each file is written by one writer (the eBPF tracker, or the shim in one
//! process) and read by [`read_file`]. A file is a 16-byte header followed by
//! records; every number is little-endian.
//!
//! ```text
//! header   0  8  magic "LOUPEAL\0"
//!          8  4  version (1)
//!         12  4  source: 1 = eBPF uprobes, 2 = LD_PRELOAD shim
//! record   0  2  kind: 1 alloc, 2 free, 3 maps (payload is /proc/PID/maps text)
//!          2  2  function: 1 malloc, 2 calloc, 3 realloc, 4 operator new,
//!                5 operator new[], 6 aligned (memalign, posix_memalign, aligned_alloc),
//!                7 free, 8 operator delete, 9 operator delete[]
//!          4  4  pid (thread group)
//!          8  4  tid
//!         12  4  payload length in bytes (0 except for maps)
//!         16  8  time, ns of CLOCK_MONOTONIC (the clock perf samples use with use_clockid)
//!         24  8  base: the block's address (returned, or passed to free)
//!         32  8  size in bytes (alloc only)
//!         40  8  site: the return address of the call into the allocator
//!         48     payload
//! ```
//!
//! An alloc record's payload, when there is one, is up to [`CALLERS`]
//! return addresses above the site (its caller's caller first, 8 bytes
//! each): what types a block returned through `void *` wrappers. Readers
//! of version 1 without it skip payloads, so the version stays 1.
//!
//! A `realloc` that moves a block writes a free of the old block and an
//! alloc of the new one with the same time. Writers append whole records
//! with one `write` each, so a killed writer leaves at most one torn record
//! at the end, which the reader drops (and counts).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"LOUPEAL\0";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 16;
pub const RECORD_LEN: usize = 48;
/// The directory inside a record database that holds allocation logs.
pub const DIR: &str = "allocs";
/// Return addresses above the site an alloc record keeps at most.
pub const CALLERS: usize = 4;
/// Return addresses above an allocation site, innermost first; 0 past the last known.
pub type Callers = [u64; CALLERS];
/// Maps payloads longer than this are corrupt (a real maps file is far smaller).
const MAX_PAYLOAD: u32 = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Uprobes,
    Preload,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Uprobes => "eBPF uprobes",
            Source::Preload => "LD_PRELOAD shim",
        }
    }
    fn code(self) -> u32 {
        match self {
            Source::Uprobes => 1,
            Source::Preload => 2,
        }
    }
}

/// The allocator entry point a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AllocFn {
    Malloc = 1,
    Calloc = 2,
    Realloc = 3,
    New = 4,
    NewArray = 5,
    Aligned = 6,
    Free = 7,
    Delete = 8,
    DeleteArray = 9,
}

impl AllocFn {
    pub fn from_code(c: u16) -> Option<AllocFn> {
        use AllocFn::*;
        [Malloc, Calloc, Realloc, New, NewArray, Aligned, Free, Delete, DeleteArray].into_iter().find(|f| *f as u16 == c)
    }
    pub fn name(self) -> &'static str {
        match self {
            AllocFn::Malloc => "malloc",
            AllocFn::Calloc => "calloc",
            AllocFn::Realloc => "realloc",
            AllocFn::New => "operator new",
            AllocFn::NewArray => "operator new[]",
            AllocFn::Aligned => "aligned alloc",
            AllocFn::Free => "free",
            AllocFn::Delete => "operator delete",
            AllocFn::DeleteArray => "operator delete[]",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Alloc { func: AllocFn, pid: u32, tid: u32, time_ns: u64, base: u64, size: u64, site: u64, callers: Callers },
    Free { func: AllocFn, pid: u32, tid: u32, time_ns: u64, base: u64 },
    Maps { pid: u32, time_ns: u64, text: String },
}

const KIND_ALLOC: u16 = 1;
const KIND_FREE: u16 = 2;
const KIND_MAPS: u16 = 3;

/// The file header for `source`.
pub fn header(source: Source) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&source.code().to_le_bytes());
    h
}

/// One record's bytes (header and payload), ready for a single `write`.
pub fn encode(r: &Record) -> Vec<u8> {
    let frames: Vec<u8> = match r {
        Record::Alloc { callers, .. } => callers.iter().take_while(|&&c| c != 0).flat_map(|c| c.to_le_bytes()).collect(),
        _ => Vec::new(),
    };
    let (kind, func, pid, tid, time, base, size, site, payload): (u16, u16, u32, u32, u64, u64, u64, u64, &[u8]) = match r {
        Record::Alloc { func, pid, tid, time_ns, base, size, site, .. } => {
            (KIND_ALLOC, *func as u16, *pid, *tid, *time_ns, *base, *size, *site, &frames)
        }
        Record::Free { func, pid, tid, time_ns, base } => (KIND_FREE, *func as u16, *pid, *tid, *time_ns, *base, 0, 0, &[]),
        Record::Maps { pid, time_ns, text } => (KIND_MAPS, 0, *pid, *pid, *time_ns, 0, 0, 0, text.as_bytes()),
    };
    let mut b = Vec::with_capacity(RECORD_LEN + payload.len());
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&func.to_le_bytes());
    b.extend_from_slice(&pid.to_le_bytes());
    b.extend_from_slice(&tid.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    for x in [time, base, size, site] {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b.extend_from_slice(payload);
    b
}

/// What a file held: its source, its records in file order, and how many
/// bytes at the end did not form a whole record (a writer killed mid-write).
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded {
    pub source: Source,
    pub records: Vec<Record>,
    pub torn_bytes: usize,
    /// Records of an unknown kind or function (a newer writer), skipped.
    pub unknown: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: not an allocation log ({why})")]
    Format { path: PathBuf, why: FormatError },
}

/// Why a file's header is not an allocation log this version reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("bad magic")]
    Magic,
    #[error("version {0}, this loupe reads {VERSION}")]
    Version(u32),
    #[error("unknown source {0}")]
    Source(u32),
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// Decodes a whole file's bytes; `Err` names why the header is not ours.
pub fn decode(bytes: &[u8]) -> Result<Decoded, FormatError> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(FormatError::Magic);
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(FormatError::Version(version));
    }
    let source = match u32_at(bytes, 12) {
        1 => Source::Uprobes,
        2 => Source::Preload,
        s => return Err(FormatError::Source(s)),
    };
    let mut out = Decoded { source, records: Vec::new(), torn_bytes: 0, unknown: 0 };
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < RECORD_LEN || u32_at(rest, 12) > MAX_PAYLOAD || rest.len() < RECORD_LEN + u32_at(rest, 12) as usize {
            out.torn_bytes = rest.len();
            break;
        }
        let payload_len = u32_at(rest, 12) as usize;
        match decode_one(&rest[..RECORD_LEN + payload_len]) {
            Some(r) => out.records.push(r),
            None => out.unknown += 1,
        }
        at += RECORD_LEN + payload_len;
    }
    Ok(out)
}

fn decode_one(b: &[u8]) -> Option<Record> {
    let (pid, tid, time_ns, base) = (u32_at(b, 4), u32_at(b, 8), u64_at(b, 16), u64_at(b, 24));
    match u16_at(b, 0) {
        KIND_ALLOC => Some(Record::Alloc {
            func: AllocFn::from_code(u16_at(b, 2))?,
            pid,
            tid,
            time_ns,
            base,
            size: u64_at(b, 32),
            site: u64_at(b, 40),
            callers: callers(&b[RECORD_LEN..]),
        }),
        KIND_FREE => Some(Record::Free { func: AllocFn::from_code(u16_at(b, 2))?, pid, tid, time_ns, base }),
        KIND_MAPS => Some(Record::Maps { pid, time_ns, text: String::from_utf8_lossy(&b[RECORD_LEN..]).into_owned() }),
        _ => None,
    }
}

/// The return addresses an alloc record's payload holds (the rest 0).
fn callers(payload: &[u8]) -> Callers {
    let mut c = [0; CALLERS];
    for (slot, b) in c.iter_mut().zip(payload.chunks_exact(8)) {
        *slot = u64::from_le_bytes(b.try_into().unwrap());
    }
    c
}

/// Reads and decodes one log file.
pub fn read_file(path: &Path) -> Result<Decoded, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    decode(&bytes).map_err(|why| Error::Format { path: path.to_path_buf(), why })
}

/// The log files of a record database, sorted by name.
pub fn files(db_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let dir = db_dir.join(DIR);
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Io { path: dir, source }),
    };
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "alog")).collect();
    v.sort();
    Ok(v)
}

/// Appends records to one log file; each record goes out in one `write`
/// once [`Writer::flush`] runs (or the buffer passes 64 KiB).
pub struct Writer {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl Writer {
    /// Creates `<db>/allocs/<name>.alog` (and the directory) with its header.
    pub fn create(db_dir: &Path, name: &str, source: Source) -> Result<Writer, Error> {
        let dir = db_dir.join(DIR);
        loupe_files::create_dir_all(&dir).map_err(|source| Error::Io { path: dir.clone(), source })?;
        let path = dir.join(format!("{name}.alog"));
        let io = |source| Error::Io { path: path.clone(), source };
        let mut file = loupe_files::create(&path).map_err(io)?;
        file.write_all(&header(source)).map_err(|source| Error::Io { path: path.clone(), source })?;
        Ok(Writer { file, buf: Vec::with_capacity(1 << 16) })
    }

    pub fn append(&mut self, r: &Record) -> io::Result<()> {
        self.buf.extend_from_slice(&encode(r));
        if self.buf.len() >= 1 << 16 {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends one record already in the log's layout (the eBPF events are).
    pub fn append_raw(&mut self, record: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(record);
        if self.buf.len() >= 1 << 16 {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is buffered. Whole records only, so a kill between
    /// flushes loses the buffer but never corrupts the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Maps { pid: 7, time_ns: 5, text: "00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n".into() },
            Record::Alloc { func: AllocFn::Calloc, pid: 7, tid: 8, time_ns: 10, base: 0x1000, size: 48, site: 0x400123, callers: [0; 4] },
            Record::Alloc {
                func: AllocFn::Malloc,
                pid: 7,
                tid: 8,
                time_ns: 11,
                base: 0x2000,
                size: 8,
                site: 0x400200,
                callers: [0x400300, 0x400400, 0, 0],
            },
            Record::Free { func: AllocFn::Free, pid: 7, tid: 9, time_ns: 20, base: 0x1000 },
        ]
    }

    #[test]
    fn round_trips_every_kind() {
        // Checks that encode then decode gives back the alloc (with and without callers), free and maps records unchanged.
        let mut bytes = header(Source::Preload).to_vec();
        for r in sample() {
            bytes.extend(encode(&r));
        }
        let d = decode(&bytes).unwrap();
        assert_eq!(d, Decoded { source: Source::Preload, records: sample(), torn_bytes: 0, unknown: 0 });
    }

    #[test]
    fn lays_out_an_alloc_record_as_documented() {
        // Checks the byte offsets the C shim and the eBPF tracker write: kind, function, pid, tid, time, base, size, site.
        let b = encode(&sample()[1]);
        assert_eq!(b.len(), RECORD_LEN);
        assert_eq!((u16_at(&b, 0), u16_at(&b, 2), u32_at(&b, 4), u32_at(&b, 8), u32_at(&b, 12)), (1, 2, 7, 8, 0));
        assert_eq!((u64_at(&b, 16), u64_at(&b, 24), u64_at(&b, 32), u64_at(&b, 40)), (10, 0x1000, 48, 0x400123));
    }

    #[test]
    fn an_alloc_records_callers_follow_it_as_its_payload() {
        // Checks an alloc with two callers carries a 16-byte payload (payload length 16) of their addresses, innermost first.
        let b = encode(&sample()[2]);
        assert_eq!((b.len(), u32_at(&b, 12)), (RECORD_LEN + 16, 16));
        assert_eq!((u64_at(&b, RECORD_LEN), u64_at(&b, RECORD_LEN + 8)), (0x400300, 0x400400));
    }

    #[test]
    fn drops_a_torn_last_record_and_keeps_the_rest() {
        // Checks robustness to a writer killed mid-record: 30 stray bytes are counted, earlier records survive.
        let mut bytes = header(Source::Uprobes).to_vec();
        bytes.extend(encode(&sample()[1]));
        bytes.extend(&encode(&sample()[3])[..30]);
        let d = decode(&bytes).unwrap();
        assert_eq!((d.records.len(), d.torn_bytes), (1, 30));
    }

    #[test]
    fn rejects_a_foreign_file_and_skips_unknown_kinds() {
        // Checks the magic test, and that a record of kind 99 is counted as unknown rather than failing the file.
        assert!(decode(b"not a log at all").is_err());
        let mut bytes = header(Source::Uprobes).to_vec();
        let mut odd = encode(&sample()[1]);
        odd[0] = 99;
        bytes.extend(odd);
        bytes.extend(encode(&sample()[3]));
        let d = decode(&bytes).unwrap();
        assert_eq!((d.records.len(), d.unknown), (1, 1));
    }

    #[test]
    fn writer_output_reads_back_from_the_database_directory() {
        // Checks Writer::create + append + drop, then files() + read_file() on the same directory.
        let db = tempfile::tempdir().unwrap();
        {
            let mut w = Writer::create(db.path(), "ebpf", Source::Uprobes).unwrap();
            for r in sample() {
                w.append(&r).unwrap();
            }
        }
        let f = files(db.path()).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(read_file(&f[0]).unwrap().records, sample());
    }
}
