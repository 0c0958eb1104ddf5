//! The access log: `<db>/data/access.dlog`, an 8-byte magic then fixed
//! 64-byte little-endian records, appended as samples arrive (a kill loses
//! at most the torn last record, which readers drop). Beside it,
//! `data/maps/<pid>` holds each sampled process's /proc/PID/maps and
//! `data/meta.json` the sampling source, rate and cache geometry.
//!
//! Record: time u64 (CLOCK_MONOTONIC ns), ip u64, addr u64, base_offset
//! i64, data_src u64, pid u32, tid u32, cpu u32, weight u32, size u16,
//! kind u8 (0 read, 1 write, 2 read-write), base u8 (DWARF register, 255
//! none), status u8 ([`Status`]), source u8 (0 timer + interpretation, 1
//! PMU), back u8 (the instruction charged starts this many bytes before
//! ip; 0: the one at ip), 1 byte zero.

use crate::interp::Kind;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"LOUPEDA1";
pub const RECORD_LEN: usize = 64;

/// What became of a sample's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `addr` is the exact data address.
    Ok = 0,
    /// The instruction touches no memory (time charged to code, not data).
    NoMemory = 1,
    /// Its address needs a register perf does not give (FS/GS base).
    Unknown = 2,
    /// The bytes at the PC did not decode.
    Invalid = 3,
    /// A kernel-mode sample (only user code is interpreted).
    Kernel = 4,
    /// The code at the PC could not be read.
    NoCode = 5,
}

impl Status {
    fn from_u8(v: u8) -> Status {
        match v {
            0 => Status::Ok,
            1 => Status::NoMemory,
            2 => Status::Unknown,
            3 => Status::Invalid,
            4 => Status::Kernel,
            _ => Status::NoCode,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Timer sample, address by instruction interpretation.
    Interpretation = 0,
    /// Memory-sampling PMU: the address the hardware reported.
    Pmu = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessRecord {
    pub time: u64,
    pub ip: u64,
    pub addr: u64,
    pub base_offset: i64,
    pub data_src: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub weight: u32,
    pub size: u16,
    pub kind: Kind,
    pub base: Option<u16>,
    pub status: Status,
    pub source: Source,
    /// The instruction charged starts this many bytes before `ip`.
    pub back: u8,
}

impl AccessRecord {
    /// Address of the instruction whose access this is.
    pub fn insn(&self) -> u64 {
        self.ip - self.back as u64
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..8].copy_from_slice(&self.time.to_le_bytes());
        b[8..16].copy_from_slice(&self.ip.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.base_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_src.to_le_bytes());
        b[40..44].copy_from_slice(&self.pid.to_le_bytes());
        b[44..48].copy_from_slice(&self.tid.to_le_bytes());
        b[48..52].copy_from_slice(&self.cpu.to_le_bytes());
        b[52..56].copy_from_slice(&self.weight.to_le_bytes());
        b[56..58].copy_from_slice(&self.size.to_le_bytes());
        b[58] = match self.kind {
            Kind::Read => 0,
            Kind::Write => 1,
            Kind::ReadWrite => 2,
        };
        b[59] = self.base.map_or(255, |r| r.min(254) as u8);
        b[60] = self.status as u8;
        b[61] = self.source as u8;
        b[62] = self.back;
        b
    }

    pub fn decode(b: &[u8; RECORD_LEN]) -> AccessRecord {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        AccessRecord {
            time: u64_at(0),
            ip: u64_at(8),
            addr: u64_at(16),
            base_offset: u64_at(24) as i64,
            data_src: u64_at(32),
            pid: u32_at(40),
            tid: u32_at(44),
            cpu: u32_at(48),
            weight: u32_at(52),
            size: u16::from_le_bytes([b[56], b[57]]),
            kind: match b[58] {
                0 => Kind::Read,
                1 => Kind::Write,
                _ => Kind::ReadWrite,
            },
            base: (b[59] != 255).then_some(b[59] as u16),
            status: Status::from_u8(b[60]),
            source: if b[61] == 1 { Source::Pmu } else { Source::Interpretation },
            back: b[62],
        }
    }

    /// An exact data address is known.
    pub fn has_addr(&self) -> bool {
        self.status == Status::Ok
    }
}

pub fn data_dir(db: &Path) -> PathBuf {
    db.join("data")
}

pub fn log_path(db: &Path) -> PathBuf {
    data_dir(db).join("access.dlog")
}

/// Decodes a whole log; a torn trailing record is dropped.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<AccessRecord>, BadMagic> {
    let body = bytes.strip_prefix(MAGIC.as_slice()).ok_or(BadMagic)?;
    Ok(body.chunks_exact(RECORD_LEN).map(|c| AccessRecord::decode(c.try_into().expect("exact chunk"))).collect())
}

/// A file that does not start with the access log's magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadMagic;

impl std::fmt::Display for BadMagic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a Loupe access log (bad magic)")
    }
}

impl std::error::Error for BadMagic {}

/// The database's access log; `Err` of kind `Log` names the file.
pub fn read(db: &Path) -> crate::error::Result<Vec<AccessRecord>> {
    let p = log_path(db);
    let bytes = std::fs::read(&p)
        .map_err(|e| crate::error::err(crate::error::ErrorKind::Log, p.display(), format!("{e} (record with `loupe record --data`)")))?;
    decode_all(&bytes).map_err(|e| crate::error::err(crate::error::ErrorKind::Log, p.display(), e))
}

/// Appends records; each `append` is one write of whole records.
pub struct Writer {
    file: std::fs::File,
}

impl Writer {
    pub fn create(db: &Path) -> io::Result<Writer> {
        std::fs::create_dir_all(data_dir(db).join("maps"))?;
        let mut file = std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(log_path(db))?;
        file.write_all(MAGIC)?;
        Ok(Writer { file })
    }

    pub fn append(&mut self, recs: &[AccessRecord]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(recs.len() * RECORD_LEN);
        for r in recs {
            buf.extend_from_slice(&r.encode());
        }
        self.file.write_all(&buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_tail() {
        // Checks every field survives encode/decode, and a log cut mid-record yields only the whole records.
        let r = AccessRecord {
            time: 1,
            ip: 2,
            addr: 3,
            base_offset: -8,
            data_src: 5,
            pid: 6,
            tid: 7,
            cpu: 1,
            weight: 9,
            size: 8,
            kind: Kind::ReadWrite,
            base: Some(12),
            status: Status::Ok,
            source: Source::Pmu,
            back: 3,
        };
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&r.encode());
        bytes.extend_from_slice(&r.encode()[..20]);
        assert_eq!(decode_all(&bytes).unwrap(), vec![r]);
        assert!(decode_all(b"garbage!").is_err());
    }
}
