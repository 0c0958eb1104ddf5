//! The frame of a store file around fuzzer bytes: magic, version, kind, the
//! bytes, and their CRC32, so that checksums do not stop the fuzzer at the door.

pub fn framed(kind: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(loupe_store::format::MAGIC);
    out.extend_from_slice(&loupe_store::format::VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}
