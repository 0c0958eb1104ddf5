//! Stress: 4 threads log 10 million mixed-size events each into the per-CPU
//! buffer while a consumer drains it. Every record must decode intact, with
//! its payload matching its (thread, sequence) stamp; timestamps never
//! decrease along a CPU's packets; packet sequence numbers are contiguous;
//! and records written + events counted as dropped = events logged, exactly.
//! Writers stamp with the TSC clock (the kernel's factors, else measured):
//! the cheap clock must keep the per-buffer order that clock_gettime keeps.

use loupe_trace::buffer::{packet_header, Buffer, Geometry, PACKET_HEADER};
use loupe_trace::record::{decode_at, Value};
use loupe_trace::spec::parse;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SPEC: &str = "<events name='stress'><event name='T::S::Rec' description='stress record'>
<layerId value='T'/><classId value='S'/><specifier value='Rec'/><fields>
<field name='thread' type='uint32' description='writer'/>
<field name='seq' type='uint64' description='sequence in the writer'/>
<field name='vals' type='list' eltType='uint64' description='seq ^ thread, 0..7 times'/>
</fields></event></events>";

const THREADS: u32 = 4;
const PER_THREAD: u64 = 10_000_000;

fn writer(buf: &Buffer, thread: u32) -> u64 {
    let mut logged = 0;
    for seq in 0..PER_THREAD {
        let n = (seq % 8) as usize;
        let len = (12 + 4 + 8 + 2 + 8 * n).next_multiple_of(8);
        buf.log(len, |b, ts| {
            b[0..8].copy_from_slice(&ts.to_le_bytes());
            b[8..10].copy_from_slice(&(len as u16).to_le_bytes());
            b[10..12].copy_from_slice(&16u16.to_le_bytes());
            b[12..16].copy_from_slice(&thread.to_le_bytes());
            b[16..24].copy_from_slice(&seq.to_le_bytes());
            b[24..26].copy_from_slice(&(n as u16).to_le_bytes());
            for i in 0..n {
                b[26 + 8 * i..34 + 8 * i].copy_from_slice(&(seq ^ thread as u64).to_le_bytes());
            }
            b[26 + 8 * n..].fill(0);
        });
        logged += 1;
    }
    logged
}

#[derive(Default)]
struct Check {
    records: u64,
    last_ts: Vec<u64>,
    next_seq: Vec<u64>,
}

impl Check {
    fn packet(&mut self, spec: &loupe_trace::spec::Spec, p: &[u8]) {
        let h = packet_header(p).expect("packet magic");
        let cpu = h.cpu as usize;
        assert_eq!(h.seq, self.next_seq[cpu], "packet sequence on cpu {cpu}");
        self.next_seq[cpu] += 1;
        assert!(h.ts_begin >= self.last_ts[cpu]);
        let mut at = PACKET_HEADER;
        while let Some((r, n)) = decode_at(spec, p, at).expect("record decodes") {
            assert!(r.ts >= self.last_ts[cpu], "timestamp went back on cpu {cpu}");
            self.last_ts[cpu] = r.ts;
            let (Value::U(t), Value::U(seq), Value::List(vals)) = (&r.fields[0], &r.fields[1], &r.fields[2]) else {
                panic!("fields");
            };
            assert_eq!(vals.len() as u64, seq % 8);
            assert!(vals.iter().all(|v| *v == Value::U(seq ^ t)));
            self.records += 1;
            at += n;
        }
    }
}

// See the file comment.
#[test]
fn four_threads_ten_million_each() {
    let spec = parse(&[("stress.xml", SPEC)]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ncpu = std::thread::available_parallelism().unwrap().get() as u32;
    let geo = Geometry { ncpu, nsub: 8, sub_size: 1 << 16 };
    let tsc = loupe_trace::tsc::TscClock::calibrate().or_else(|| loupe_trace::tsc::TscClock::measure(std::time::Duration::from_millis(50)));
    assert!(tsc.is_some() || !cfg!(target_arch = "x86_64"));
    let buf = Arc::new(Buffer::create_with_clock(&dir.path().join("shm"), geo, tsc).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (buf, done, spec) = (buf.clone(), done.clone(), spec.clone());
        std::thread::spawn(move || {
            let mut c = Check { last_ts: vec![0; ncpu as usize], next_seq: vec![0; ncpu as usize], ..Default::default() };
            let mut p = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                let mut got = false;
                for cpu in 0..ncpu as usize {
                    if finished {
                        buf.flush(cpu);
                    }
                    while buf.take(cpu, &mut p) {
                        c.packet(&spec, &p);
                        got = true;
                    }
                }
                if finished && !got {
                    return c;
                }
                if !got {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let buf = buf.clone();
            std::thread::spawn(move || writer(&buf, t))
        })
        .collect();
    let logged: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    done.store(true, Ordering::Release);
    let c = consumer.join().unwrap();
    let dropped: u64 = (0..ncpu as usize).map(|cpu| buf.dropped(cpu)).sum();
    eprintln!("logged {logged} written {} dropped {dropped}", c.records);
    assert_eq!(logged, THREADS as u64 * PER_THREAD);
    assert_eq!(c.records + dropped, logged);
    assert!(c.records > 0);
}
