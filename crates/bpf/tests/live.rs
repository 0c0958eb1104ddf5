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
    assert!(mine > 1500, "{mine} samples of the busy process");
    // The loop's user-mode samples fall on its handful of instructions; its kernel ones (the clock syscall, and
    // the interrupts and preemptions of a loaded machine) spread over as many addresses as the load brings.
    let user = entries.iter().filter(|e| e.pid == pid && !e.kernel);
    let (user_samples, user_entries) = user.fold((0, 0), |(n, k), e| (n + e.count, k + 1));
    let factor = user_samples as f64 / f64::from(user_entries);
    eprintln!("samples {}, entries {}, busy loop's user-mode aggregation factor {factor:.1}", c.samples, entries.len());
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

mod stacks {
    use super::burn;
    use loupe_bpf::stacks::{ProcessUnwind, StackAggregator, StackEntry};
    use loupe_perf::{Record, Sampler, SamplerConfig};

    fn setup(fp_only: bool) -> (Sampler, StackAggregator) {
        let cfg = SamplerConfig { freq_hz: 1000, callchain: true, ..Default::default() };
        let s = Sampler::open(&cfg).expect("open sampler (run as root)");
        let mut bpf = StackAggregator::load(16384, 16384, fp_only, 1 << 16).expect("load the stack program");
        bpf.enable_run_stats().unwrap();
        let fds: Vec<(usize, i32)> = s.event_fds().collect();
        bpf.attach(&fds).unwrap();
        eprintln!("stacks.bpf.c: the verifier processed {:?} instructions", bpf.verified_instructions());
        (s, bpf)
    }

    /// Burns `ms` of CPU in a thread while draining the rings and the
    /// kernel's tables as the daemon would (every 100 ms).
    fn run(s: &mut Sampler, bpf: &mut StackAggregator, ms: u64) -> (u32, Vec<StackEntry>, Vec<Record>) {
        let (mut entries, mut recs) = (Vec::new(), Vec::new());
        s.enable().unwrap();
        let t = std::thread::spawn(move || burn(ms));
        while !t.is_finished() {
            s.poll(std::time::Duration::from_millis(100)).unwrap();
            s.drain(&mut recs);
            bpf.drain(&mut entries).unwrap();
        }
        s.disable().unwrap();
        let pid = t.join().unwrap();
        bpf.drain(&mut entries).unwrap();
        bpf.drain(&mut entries).unwrap();
        s.drain(&mut recs);
        (pid, entries, recs)
    }

    #[test]
    fn frame_pointer_walks_are_counted_in_the_kernel_and_add_up() {
        // Checks samples = counted + streamed = the kernel's runs, counted samples reach user space only as counts with stacks whose leaf is the pc, and streamed ones reach the ring.
        let (mut s, mut bpf) = setup(true);
        let (pid, entries, recs) = run(&mut s, &mut bpf, 1500);
        let c = bpf.counters();
        eprintln!("{c:?}, {} entries", entries.len());
        let drained: u64 = entries.iter().map(|e| e.count).sum();
        assert_eq!(drained, c.counted, "{c:?}");
        assert_eq!(c.counted + c.streamed(), c.samples, "{c:?}");
        assert_eq!(bpf.run_stats().run_count, c.samples);
        let in_ring = recs.iter().filter(|r| matches!(r, Record::Sample(_))).count() as u64;
        assert_eq!(in_ring + s.lost(), c.streamed(), "every streamed sample, and only those, reaches the ring");
        assert_eq!(c.streamed_table_full, 0, "{c:?}");
        let mine: Vec<&StackEntry> = entries.iter().filter(|e| e.pid == pid).collect();
        let n: u64 = mine.iter().map(|e| e.count).sum();
        assert!(n > 1000, "{n} samples of the busy process counted in the kernel");
        for e in &mine {
            assert!(!e.lost_stack);
            for st in e.user.iter().chain(&e.kernel_stack) {
                assert!(st.frames.len() <= 127);
            }
            if e.kernel {
                assert_eq!(e.kernel_stack.as_ref().unwrap().frames[0], e.ip);
            } else {
                assert!(e.kernel_stack.is_none());
                assert_eq!(
                    e.user.as_ref().expect("a user-mode sample has a user stack").frames()[0],
                    e.ip,
                    "the user stack starts at the pc"
                );
            }
        }
        assert!(bpf.stacks_read > 0);
        assert_eq!(bpf.hash_mismatches, 0, "stacks.bpf.c's hash_stack and stack_hash agree on every stack read");
        // Drained every 100 ms: about 100 samples of the loop per drain, in user mode on a few stacks (kernel-mode
        // stacks spread with the machine's load).
        let user: Vec<&&StackEntry> = mine.iter().filter(|e| !e.kernel).collect();
        let user_n: u64 = user.iter().map(|e| e.count).sum();
        assert!(user_n as f64 / user.len() as f64 > 4.0, "stacks aggregate: {user_n} user-mode samples in {} entries", user.len());
    }

    #[test]
    fn processes_are_streamed_until_described_and_when_marked() {
        // Checks that an undescribed process and a process marked for stack copies take the ring, each counted by its reason, and a described one is counted in the kernel.
        // 400 ms of CPU at 1000/s is ~400 samples of this process per phase; a loaded machine's frequency
        // adjustment gave as few as 294, so each phase asks for 100 and judges where they went.
        let (mut s, mut bpf) = setup(false);
        let me = std::process::id();
        let mine_in_ring = |recs: &[Record]| recs.iter().filter(|r| matches!(r, Record::Sample(x) if x.pid == me)).count() as u64;
        let (_, entries, recs) = run(&mut s, &mut bpf, 400);
        let c0 = bpf.counters();
        assert!(!entries.iter().any(|e| e.pid == me), "an undescribed process is not walked by frame pointers");
        assert!(recs.iter().any(|r| matches!(r, Record::Sample(x) if x.pid == me && !x.callchain.is_empty())));
        assert!(c0.streamed_unknown >= 100, "{c0:?}");
        bpf.set_process(me, &ProcessUnwind { stream: true, frame_pointers: vec![] }).unwrap();
        let (_, _, recs) = run(&mut s, &mut bpf, 400);
        let c1 = bpf.counters();
        assert!(c1.streamed_process - c0.streamed_process >= 100, "{c1:?}");
        assert!(c1.streamed_process - c0.streamed_process >= mine_in_ring(&recs), "{c1:?}");
        bpf.set_process(me, &ProcessUnwind { stream: false, frame_pointers: vec![(0, 0x7fff_ffff_ffff)] }).unwrap();
        let (_, entries, recs) = run(&mut s, &mut bpf, 400);
        let n: u64 = entries.iter().filter(|e| e.pid == me).map(|e| e.count).sum();
        let streamed = mine_in_ring(&recs);
        assert!(n >= 100 && n >= 9 * streamed, "{n} counted, {streamed} streamed once all its code is said to keep frame pointers");
        bpf.set_process(me, &ProcessUnwind::default()).unwrap();
        let c2 = bpf.counters();
        let (_, entries, _) = run(&mut s, &mut bpf, 400);
        assert!(!entries.iter().any(|e| e.pid == me && e.user.is_some()), "a leaf outside the ranges takes the ring");
        assert!(bpf.counters().streamed_leaf - c2.streamed_leaf >= 100);
        bpf.forget_process(me);
    }
}

#[test]
fn off_cpu_program_shares_the_stack_programs_unwind_tables() {
    // Checks that the off-CPU program passes the verifier with the stack program's unwind maps, and asks for a process it blocks in through that program's unwind_wanted.
    use loupe_bpf::offcpu::OffCpuAggregator;
    use loupe_bpf::stacks::StackAggregator;
    let stacks = StackAggregator::load(1024, 1024, false, 1 << 16).expect("load the stack program (run as root)");
    let mut off = OffCpuAggregator::load(true, Some(&stacks)).expect("load the off-CPU program with the shared tables");
    eprintln!("offcpu.bpf.c: the verifier processed {:?} instructions", off.verified_instructions());
    let me = std::process::id();
    off.follow(me).unwrap();
    off.attach().unwrap();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = off.counters();
    assert!(stacks.take_unwind_wanted().contains(&me), "{c:?}");
    assert!(c.unwind_unknown >= 5, "blocks of an undescribed process take frame pointers: {c:?}");
}
