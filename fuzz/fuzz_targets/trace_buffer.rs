//! The shared-memory trace buffer as its consumer (`loupe trace record`, root)
//! sees it after traced processes wrote into it: the input's first 512 bytes overwrite
//! the control blocks (heads, drop counts, consumed counts, commit counts), the rest
//! the packets of a 2-CPU, 2-packet buffer; then the recorder pumps it (flush, take,
//! seal, trim, decode) and a writer attaches and logs on every CPU.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_trace::buffer::{Buffer, Geometry};
use loupe_trace::client::{pump, Client};
use loupe_trace::record::Record;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use loupe_fuzz::spec;

const GEO: Geometry = Geometry { ncpu: 2, nsub: 2, sub_size: 32768 };
/// Where the control blocks (256 bytes a CPU) and the data start in a buffer of [`GEO`] (see `loupe_trace::buffer`).
const CTL: usize = 4096;
const CTL_LEN: usize = 2 * 256;
const DATA: usize = 8192;
const LEN: usize = DATA + 2 * 2 * 32768;

struct Count(usize);
impl Client for Count {
    fn record(&mut self, _: usize, _: &Record) {
        self.0 += 1;
    }
    fn wants_records(&self) -> bool {
        true
    }
}

fn scratch() -> &'static (Buffer, PathBuf, std::fs::File) {
    static B: OnceLock<(Buffer, PathBuf, std::fs::File)> = OnceLock::new();
    B.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("loupe-fuzz-buffer-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let buf = Buffer::create_with_clock(&path, GEO, None).expect("scratch buffer");
        let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open scratch buffer");
        (buf, path, file)
    })
}

fuzz_target!(|data: &[u8]| {
    let (buf, path, file) = scratch();
    let spec = spec::spec();
    let mut image = vec![0u8; LEN - CTL];
    let (ctl, packets) = data.split_at(data.len().min(CTL_LEN));
    image[..ctl.len()].copy_from_slice(ctl);
    let n = packets.len().min(LEN - DATA);
    image[DATA - CTL..DATA - CTL + n].copy_from_slice(&packets[..n]);
    file.write_all_at(&image, CTL as u64).expect("write buffer");
    let mut scratch = Vec::new();
    let mut count = Count(0);
    let _ = pump(buf, spec, &mut [&mut count], false, &mut scratch);
    let _ = pump(buf, spec, &mut [&mut count], true, &mut scratch);
    let writer = Buffer::open(path).expect("a valid header opens");
    let ev = spec.by_name("A::B::Text").expect("event");
    let rec = loupe_trace::record::encode(ev, 0, &[]);
    for cpu in 0..2 {
        writer.log_on(cpu, rec.len(), |b, _| b.copy_from_slice(&rec));
    }
    let _ = pump(buf, spec, &mut [&mut count], true, &mut scratch);
});
