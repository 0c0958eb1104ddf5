//! The branch path beside [`Collector::attribute`]: each record of a
//! sample's branch stack (from, to, mispredicted) is mapped to (image,
//! offset) at both ends in the sample's process and counted per (image,
//! event, from, to). A branch whose ends lie in different images (a call
//! through the PLT into a library, or its return) or in no known image is
//! counted in [`BranchStats`], not stored: BOLT lays out one image at a time.
//!
//! Between consecutive records the CPU ran straight through, from the older
//! record's target to the newer one's source (records come newest first):
//! such a trace is counted when both ends lie in one image, in order, less
//! than [`MAX_TRACE`] bytes apart.

use crate::{kernel, Collector};
use loupe_model::branches::BranchProfile;
use loupe_model::ImageOffset;
use loupe_perf::Sample;
use std::collections::HashMap;

/// (image, offset) of one end of a branch.
type End = (u32, u64);

/// Longest straight run believed: farther apart, the two records were not
/// consecutive in execution (a record lost to filtering or overflow).
pub const MAX_TRACE: u64 = 4096;

/// How branch records fared, for `record`'s summary and the daemon's stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BranchStats {
    /// Samples that carried a branch stack.
    pub stacks: u64,
    /// Branch records in those stacks.
    pub records: u64,
    /// Records with both ends in one image: stored.
    pub stored: u64,
    /// Records from one image into another: counted only.
    pub cross_image: u64,
    /// Records with an end in no known mapping: counted only.
    pub unknown: u64,
    /// Straight runs between consecutive records: stored, and not believed
    /// (ends in different or unknown images, backwards, or too long).
    pub traces: u64,
    pub bad_traces: u64,
}

#[derive(Default)]
struct Counts {
    pairs: HashMap<(u64, u64), (u64, u64)>,
    traces: HashMap<(u64, u64), u64>,
    stacks: u64,
}

/// Branch records counted since the last flush, per (image, event).
#[derive(Default)]
pub struct BranchState {
    counts: HashMap<(u32, u16), Counts>,
    pub stats: BranchStats,
}

impl Collector {
    /// Turns branch-record collection on; samples must carry branch stacks.
    pub fn enable_branches(&mut self) {
        self.branches = Some(Box::default());
    }

    pub fn branch_stats(&self) -> Option<BranchStats> {
        self.branches.as_ref().map(|b| b.stats)
    }

    /// (image, offset) of a branch end in process `pid`; None when no mapping holds it.
    fn branch_end(&mut self, pid: u32, addr: u64) -> Option<End> {
        if addr >= kernel::KERNEL_SPACE_START {
            return Some(self.kernel_location(addr));
        }
        self.user_location(pid, addr).map(|(image, off, _)| (image, off))
    }

    /// Counts one sample's branch stack.
    pub(crate) fn sample_branches(&mut self, s: &Sample) {
        let Some(mut st) = self.branches.take() else { return };
        st.stats.stacks += 1;
        st.stats.records += s.branches.len() as u64;
        let event = s.event_index as u16;
        let mut touched: Vec<u32> = Vec::new();
        let ends: Vec<(Option<End>, Option<End>)> =
            s.branches.iter().map(|b| (self.branch_end(s.pid, b.from), self.branch_end(s.pid, b.to))).collect();
        for (i, b) in s.branches.iter().enumerate() {
            if let Some(older) = ends.get(i + 1) {
                match (older.1, ends[i].0) {
                    (Some((si, start)), Some((ei, end))) if si == ei && start <= end && end - start < MAX_TRACE => {
                        *st.counts.entry((si, event)).or_default().traces.entry((start, end)).or_insert(0) += 1;
                        st.stats.traces += 1;
                    }
                    _ => st.stats.bad_traces += 1,
                }
            }
            match ends[i] {
                (Some((fi, from)), Some((ti, to))) if fi == ti => {
                    let c = st.counts.entry((fi, event)).or_default().pairs.entry((from, to)).or_insert((0, 0));
                    c.0 += 1;
                    c.1 += b.mispredicted as u64;
                    st.stats.stored += 1;
                    if !touched.contains(&fi) {
                        touched.push(fi);
                    }
                }
                (Some(_), Some(_)) => st.stats.cross_image += 1,
                _ => st.stats.unknown += 1,
            }
        }
        for i in touched {
            st.counts.entry((i, event)).or_default().stacks += 1;
        }
        self.branches = Some(st);
    }

    /// Hands over every branch record counted since the last call, one
    /// profile per (image, event).
    pub fn take_branches(&mut self) -> Vec<BranchProfile> {
        let Some(st) = self.branches.as_mut() else { return Vec::new() };
        let mut out: Vec<BranchProfile> = st
            .counts
            .drain()
            .map(|((image, event), c)| {
                let mut p = BranchProfile::new(self.images.get(image).clone(), self.events[event as usize].clone());
                p.stacks = c.stacks;
                for ((from, to), (taken, mispredicted)) in c.pairs {
                    p.add(ImageOffset(from), ImageOffset(to), taken, mispredicted);
                }
                for ((start, end), n) in c.traces {
                    p.add_trace(ImageOffset(start), ImageOffset(end), n);
                }
                p
            })
            .collect();
        out.sort_by(|a, b| (&a.image, &a.event).cmp(&(&b.image, &b.event)));
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::{Collector, KernelInfo};
    use loupe_model::branches::BranchCount;
    use loupe_model::{BuildId, EventName, ImageOffset};
    use loupe_perf::{BranchEntry, Mmap, Record, Sample};

    // A pid no process has (above the default pid_max), so the collector never finds it in /proc.
    const PID: u32 = 4_200_000;

    fn mmap(addr: u64, pgoff: u64, name: &str, bid: u8) -> Record {
        let m = Mmap {
            pid: PID,
            tid: PID,
            addr,
            len: 0x10000,
            pgoff,
            prot: 5,
            flags: 2,
            filename: name.into(),
            build_id: Some(vec![bid; 20]),
            time: 1,
        };
        Record::Mmap(m)
    }

    fn br(from: u64, to: u64, mispredicted: bool) -> BranchEntry {
        BranchEntry { from, to, mispredicted, predicted: !mispredicted, in_tx: false, abort: false, cycles: 0 }
    }

    fn sample(branches: Vec<BranchEntry>) -> Record {
        Record::Sample(Sample {
            event_index: 0,
            pid: PID,
            tid: PID,
            ip: 0x401005,
            time: 2,
            cpu: 0,
            period: 100_000,
            mode: loupe_model::CpuMode::User,
            callchain: vec![],
            user_regs: None,
            user_stack: vec![],
            branches,
        })
    }

    #[test]
    fn sample_bytes_as_the_kernel_writes_them_reach_the_profile() {
        // Checks the whole decode path on bytes laid out by hand per perf_event.h for the sampler's `--lbr
        // --no-stacks` sample_type (IDENTIFIER, IP, TID, TIME, CPU, PERIOD, BRANCH_STACK): two records, newest
        // first, the older one mispredicted, become (0x3005 -> 0x3040) and (0x3100 -> 0x3000, mispredicted) in
        // the app image (mapped at 0x400000 from file offset 0x1000), and the run between them, 0x3000..0x3005.
        let mut body: Vec<u8> = Vec::new();
        for w in [77u64, 0x402041] {
            body.extend(w.to_ne_bytes()); // IDENTIFIER, IP
        }
        body.extend(PID.to_ne_bytes()); // TID: pid, tid
        body.extend(PID.to_ne_bytes());
        body.extend(5u64.to_ne_bytes()); // TIME
        body.extend(1u32.to_ne_bytes()); // CPU, reserved
        body.extend(0u32.to_ne_bytes());
        body.extend(250_000u64.to_ne_bytes()); // PERIOD
        for w in [2u64, 0x402005, 0x402040, 0x7 << 4, 0x402100, 0x402000, 1] {
            body.extend(w.to_ne_bytes()); // nr, then {from, to, flags} x 2
        }
        let mut rec = Vec::new();
        rec.extend(loupe_perf::sys::RECORD_SAMPLE.to_ne_bytes());
        rec.extend(2u16.to_ne_bytes()); // misc: user mode
        rec.extend(((8 + body.len()) as u16).to_ne_bytes());
        rec.extend(body);
        use loupe_perf::sys::*;
        let sample_type = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_PERIOD | SAMPLE_BRANCH_STACK;
        let layout = loupe_perf::Layout { ids: vec![(77, 0)], ..loupe_perf::Layout::new(loupe_perf::Format::new(sample_type)) };
        let r = loupe_perf::record::parse(&rec, &layout).expect("a well-formed sample");
        let kernel = KernelInfo { text_base: None, build_id: None, modules: vec![] };
        let mut c = Collector::new(vec![EventName::new("cycles")], kernel, None);
        c.enable_branches();
        c.process(&mmap(0x400000, 0x1000, "/opt/app", 1));
        c.process(&r);
        let got = c.take_branches();
        assert_eq!(got.len(), 1);
        let recs: Vec<_> = got[0].records.clone().into_iter().collect();
        assert_eq!(
            recs,
            vec![
                ((ImageOffset(0x3005), ImageOffset(0x3040)), BranchCount { taken: 1, mispredicted: 0 }),
                ((ImageOffset(0x3100), ImageOffset(0x3000)), BranchCount { taken: 1, mispredicted: 1 }),
            ]
        );
        assert_eq!(got[0].traces.clone().into_iter().collect::<Vec<_>>(), vec![((ImageOffset(0x3000), ImageOffset(0x3005)), 1)]);
    }

    #[test]
    fn records_land_per_image_at_file_offsets_and_round_trip_the_store() {
        // Checks by construction: app mapped at 0x400000 from file offset 0x1000 and libc at 0x7f0000000000; three
        // samples' stacks hold 4 x (0x402005 -> 0x402040, 1 mispredicted), 1 x (0x402100 -> 0x402000), one call into
        // libc and one branch from nowhere. Stored: (0x3005 -> 0x3040) taken 4 mispredicted 1, (0x3100 -> 0x3000)
        // taken 1, each at address - 0x400000 + 0x1000; the cross-image and unknown ones only counted.
        let kernel = KernelInfo { text_base: None, build_id: None, modules: vec![] };
        let mut c = Collector::new(vec![EventName::new("cycles")], kernel, None);
        c.enable_branches();
        c.process(&mmap(0x400000, 0x1000, "/opt/app", 1));
        c.process(&mmap(0x7f00_0000_0000, 0, "/usr/lib/libc.so.6", 2));
        c.process(&sample(vec![br(0x402005, 0x402040, true), br(0x402005, 0x402040, false), br(0x402100, 0x402000, false)]));
        c.process(&sample(vec![br(0x402005, 0x402040, false), br(0x402010, 0x7f00_0000_1000, false)]));
        c.process(&sample(vec![br(0x402005, 0x402040, false), br(0x90_0000, 0x402000, false)]));
        let st = c.branch_stats().unwrap();
        assert_eq!((st.stacks, st.records, st.stored, st.cross_image, st.unknown), (3, 7, 5, 1, 1));
        // Traces (older record's target .. newer record's source): stack 1 gives 0x402040..0x402005 (backwards: not
        // believed) and 0x402000..0x402005; stack 2 gives 0x7f0000001000..0x402005 (two images); stack 3 gives
        // 0x402000..0x402005 again.
        assert_eq!((st.traces, st.bad_traces), (2, 2));
        let got = c.take_branches();
        assert_eq!(got.len(), 1);
        let p = &got[0];
        assert_eq!((p.image.path.as_str(), p.image.build_id.clone(), p.stacks), ("/opt/app", Some(BuildId(vec![1; 20])), 3));
        let want = [
            ((ImageOffset(0x3005), ImageOffset(0x3040)), BranchCount { taken: 4, mispredicted: 1 }),
            ((ImageOffset(0x3100), ImageOffset(0x3000)), BranchCount { taken: 1, mispredicted: 0 }),
        ];
        assert_eq!(p.records.clone().into_iter().collect::<Vec<_>>(), want.to_vec());
        assert_eq!(p.traces.clone().into_iter().collect::<Vec<_>>(), vec![((ImageOffset(0x3000), ImageOffset(0x3005)), 2)]);
        assert!(c.take_branches().is_empty(), "a second take must start empty");

        let dir = tempfile::tempdir().unwrap();
        let db = loupe_store::Database::create(&dir.path().join("db")).unwrap();
        let e = db.current_epoch().unwrap();
        db.merge_branches(e, &got).unwrap();
        db.merge_branches(e, &got).unwrap();
        let (back, problems) = db.load_branches(e, &|_| true).unwrap();
        assert!(problems.is_empty());
        assert_eq!(back[0].records[&want[0].0], BranchCount { taken: 8, mispredicted: 2 });
        assert_eq!((back[0].records[&want[1].0].taken, back[0].stacks), (2, 6));
        assert_eq!(back[0].traces[&(ImageOffset(0x3000), ImageOffset(0x3005))], 4);
    }
}
