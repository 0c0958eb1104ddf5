//! The BPF aggregator on real sampling events (needs root).

use loupe_bpf::{AggEntry, BpfAggregator};
use loupe_perf::{Record, Sampler, SamplerConfig};
use std::time::Duration;

/// Spins until this thread has used `ms` of CPU time (not wall time, so a
/// busy machine only makes the test slower, not weaker).
fn burn(ms: u64) -> u32 {
    let cpu = || {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes into the timespec we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    };
    let start = cpu();
    let mut x = 1u64;
    while cpu() - start < Duration::from_millis(ms) {
        for _ in 0..200_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
    std::process::id()
}

fn sampler(freq: u64) -> Sampler {
    Sampler::open(&SamplerConfig { freq_hz: freq, ..Default::default() }).expect("open sampler (run as root)")
}

#[test]
fn counts_add_up_and_aggregate_a_tight_loop() {
    // Checks drained counts == BPF sample counter == the kernel's run count, no samples in the perf ring, and a high aggregation factor.
    let mut s = sampler(1000);
    let mut bpf = BpfAggregator::load(16384).expect("load BPF");
    bpf.enable_run_stats().unwrap();
    let fds: Vec<(usize, i32)> = s.event_fds().collect();
    bpf.attach(&fds).unwrap();
    s.enable().unwrap();
    let pid = std::thread::spawn(|| burn(2000)).join().unwrap();
    s.disable().unwrap();
    let mut entries: Vec<AggEntry> = Vec::new();
    bpf.drain(&mut entries).unwrap();
    bpf.drain(&mut entries).unwrap();
    let c = bpf.counters();
    let total: u64 = entries.iter().map(|e| e.count).sum();
    assert_eq!(total + c.dropped, c.samples, "{c:?}");
    assert_eq!(c.dropped, 0);
    assert_eq!(bpf.run_stats().run_count, c.samples, "the kernel ran the program once per counted sample");
    let mine: u64 = entries.iter().filter(|e| e.pid == pid).map(|e| e.count).sum();
    let mine_entries = entries.iter().filter(|e| e.pid == pid).count() as f64;
    assert!(mine > 1500, "{mine} samples of the busy process");
    let factor = mine as f64 / mine_entries;
    eprintln!("samples {}, entries {}, busy-process aggregation factor {factor:.1}", c.samples, entries.len());
    assert!(factor >= 20.0, "aggregation factor {factor:.1}");
    assert!(entries.iter().all(|e| e.period > 0 && e.period / e.count >= 900_000 && e.period / e.count <= 1_100_000));
    let mut recs = Vec::new();
    s.drain(&mut recs);
    assert!(!recs.iter().any(|r| matches!(r, Record::Sample(_))), "samples must not reach the perf ring");
}

#[test]
fn full_table_evicts_instead_of_losing() {
    // Checks that a tiny table sends overflow to the eviction ring, and every sample is accounted for.
    let s = sampler(5000);
    let mut bpf = BpfAggregator::load(8).expect("load BPF");
    let fds: Vec<(usize, i32)> = s.event_fds().collect();
    bpf.attach(&fds).unwrap();
    s.enable().unwrap();
    // Many processes and pcs: the table of 8 keys overflows.
    let _ = std::process::Command::new("sh")
        .args(["-c", "for i in $(seq 200); do /bin/true; done; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"])
        .status();
    s.disable().unwrap();
    let mut entries = Vec::new();
    bpf.drain(&mut entries).unwrap();
    bpf.drain(&mut entries).unwrap();
    let c = bpf.counters();
    let total: u64 = entries.iter().map(|e| e.count).sum();
    eprintln!("{c:?}, drained {total}");
    assert!(c.evicted > 0, "{c:?}");
    assert_eq!(total + c.dropped, c.samples, "{c:?}");
}
