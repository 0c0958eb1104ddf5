//! `PERF_RECORD_SAMPLE` for every `sample_type`: one parser over a byte
//! slice, fields in the kernel's order (`perf_output_sample`), variable
//! parts borrowed from the record, and a typed error naming the field a
//! truncated or malformed record fails in. It never panics, whatever the
//! bytes.
//!
//! ```
//! use loupe_perf::sample::{parse_sample, Format, Layout};
//! use loupe_perf::sys;
//! let layout = Layout::new(Format::new(sys::SAMPLE_IP | sys::SAMPLE_TID));
//! let mut rec = Vec::new();
//! rec.extend(sys::RECORD_SAMPLE.to_ne_bytes());
//! rec.extend(2u16.to_ne_bytes()); // misc: user mode
//! rec.extend(24u16.to_ne_bytes()); // size
//! rec.extend(0x401000u64.to_ne_bytes());
//! rec.extend([7u32, 8].map(u32::to_ne_bytes).concat());
//! let s = parse_sample(&layout, &rec).unwrap();
//! assert_eq!((s.ip, s.pid, s.tid), (Some(0x401000), Some(7), Some(8)));
//! ```

use crate::sys::{self, PerfEventAttr};
use loupe_model::CpuMode;

/// `read_format` bits.
pub mod read {
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    pub const ID: u64 = 1 << 2;
    pub const GROUP: u64 = 1 << 3;
    pub const LOST: u64 = 1 << 4;
}

/// Every `sample_type` bit this parser reads.
pub const KNOWN_SAMPLE_TYPE: u64 = (1 << 25) - 1;

/// What the kernel writes into one event's samples: the fields of its
/// `perf_event_attr` that decide the layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Format {
    pub sample_type: u64,
    /// Shape of the READ field.
    pub read_format: u64,
    /// `HW_INDEX` and `COUNTERS` change the BRANCH_STACK field.
    pub branch_sample_type: u64,
    /// Registers in REGS_USER, in increasing bit order.
    pub regs_user: u64,
    /// Registers in REGS_INTR.
    pub regs_intr: u64,
}

impl Format {
    /// A format with only `sample_type` (no READ, register masks or branch options).
    pub const fn new(sample_type: u64) -> Format {
        Format { sample_type, read_format: 0, branch_sample_type: 0, regs_user: 0, regs_intr: 0 }
    }

    /// The format of the samples of an event opened with `attr`.
    pub fn of(attr: &PerfEventAttr) -> Format {
        Format {
            sample_type: attr.sample_type,
            read_format: attr.read_format,
            branch_sample_type: attr.branch_sample_type,
            regs_user: attr.sample_regs_user,
            regs_intr: attr.sample_regs_intr,
        }
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }
}

/// How to read the samples of one ring: the events' formats, and which
/// event each kernel id belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The format of every event not in `per_event`; it also says where the
    /// id that picks the event lies (IDENTIFIER, else ID).
    pub format: Format,
    /// (event index, format) of events whose samples differ from `format`.
    pub per_event: Vec<(usize, Format)>,
    /// (kernel event id, event index); an id not listed is event 0.
    pub ids: Vec<(u64, usize)>,
}

impl Layout {
    /// One format for every sample.
    pub const fn new(format: Format) -> Layout {
        Layout { format, per_event: Vec::new(), ids: Vec::new() }
    }

    fn format_of(&self, event_index: usize) -> &Format {
        self.per_event.iter().find(|(i, _)| *i == event_index).map_or(&self.format, |(_, f)| f)
    }
}

/// A field of a sample record, to say where parsing stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Field {
    Header,
    Identifier,
    Ip,
    Tid,
    Time,
    Addr,
    Id,
    StreamId,
    Cpu,
    Period,
    Read,
    Callchain,
    Raw,
    BranchStack,
    RegsUser,
    StackUser,
    Weight,
    DataSrc,
    Transaction,
    RegsIntr,
    PhysAddr,
    Cgroup,
    DataPageSize,
    CodePageSize,
    Aux,
}

/// Why a record is not a readable sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SampleErrorKind {
    #[error("not a sample (record type {record_type})")]
    NotSample { record_type: u32 },
    /// The record ends inside the field (or a count in it runs past the end).
    #[error("record ends inside the field")]
    Truncated,
    /// The format asks for `sample_type` bits this parser does not know.
    #[error("unknown sample_type bits {bits:#x}")]
    UnknownSampleType { bits: u64 },
    /// A register dump with an ABI other than none, 32 or 64 bit.
    #[error("register ABI {abi} is none of 0, 1, 2")]
    BadAbi { abi: u64 },
}

/// A sample record that does not parse, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("perf sample: {kind} ({field:?} at byte {offset})")]
pub struct SampleError {
    kind: SampleErrorKind,
    field: Field,
    offset: usize,
}

impl SampleError {
    pub fn kind(&self) -> SampleErrorKind {
        self.kind
    }
    /// The field the record failed in.
    pub fn field(&self) -> Field {
        self.field
    }
    /// Byte offset of that field in the record.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// A run of native-endian u64s inside a record (which need not be aligned).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Words<'a>(&'a [u8]);

impl<'a> Words<'a> {
    pub fn len(&self) -> usize {
        self.0.len() / 8
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn get(&self, i: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(self.0.get(i.checked_mul(8)?..)?.get(..8)?.try_into().ok()?))
    }
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        self.0.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8-byte chunk")))
    }
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// A register dump (REGS_USER or REGS_INTR): the values of `mask`'s
/// registers in increasing bit order; none when `abi` is 0 (no registers,
/// as for a kernel thread's REGS_USER).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs<'a> {
    pub abi: u64,
    pub mask: u64,
    pub values: Words<'a>,
}

impl Regs<'_> {
    /// Register number `reg` (`perf_regs.h`), when sampled.
    pub fn get(&self, reg: u32) -> Option<u64> {
        let bit = 1u64.checked_shl(reg)?;
        if self.abi == 0 || self.mask & bit == 0 {
            return None;
        }
        self.values.get((self.mask & (bit - 1)).count_ones() as usize)
    }
}

/// STACK_USER: the copy of the user stack from the stack pointer up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserStack<'a> {
    /// All `sample_stack_user` bytes the kernel reserved.
    pub data: &'a [u8],
    /// How many of them it filled (the dynamic size).
    pub dyn_size: u64,
}

impl<'a> UserStack<'a> {
    /// The filled part of the copy.
    pub fn valid(&self) -> &'a [u8] {
        &self.data[..(self.dyn_size.min(self.data.len() as u64) as usize)]
    }
}

/// One taken branch of a branch stack (`struct perf_branch_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchEntry {
    pub from: u64,
    pub to: u64,
    /// The branch's target was mispredicted.
    pub mispredicted: bool,
    /// The target was predicted (both false: the CPU does not say).
    pub predicted: bool,
    pub in_tx: bool,
    pub abort: bool,
    /// Core cycles since the previous branch record (0: not reported).
    pub cycles: u16,
}

impl BranchEntry {
    /// Decodes the flags word: bit 0 mispred, 1 predicted, 2 in_tx,
    /// 3 abort, bits 4-19 cycles (then type, spec, new_type, priv, which
    /// Loupe does not use), as the kernel's little-endian bitfield lays them out.
    pub fn from_raw(from: u64, to: u64, flags: u64) -> BranchEntry {
        BranchEntry {
            from,
            to,
            mispredicted: flags & 1 != 0,
            predicted: flags & 2 != 0,
            in_tx: flags & 4 != 0,
            abort: flags & 8 != 0,
            cycles: (flags >> 4) as u16,
        }
    }
}

/// BRANCH_STACK: newest branch first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Branches<'a> {
    /// `hw_idx`, when `branch_sample_type` has HW_INDEX.
    pub hw_index: Option<u64>,
    /// `nr` x {from, to, flags}.
    pub entries: Words<'a>,
    /// One counters word per entry, when `branch_sample_type` has COUNTERS.
    pub counters: Option<Words<'a>>,
}

impl<'a> Branches<'a> {
    pub fn len(&self) -> usize {
        self.entries.len() / 3
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = BranchEntry> + 'a {
        self.entries.0.chunks_exact(24).map(|e| {
            let w = Words(e);
            BranchEntry::from_raw(w.get(0).unwrap_or(0), w.get(1).unwrap_or(0), w.get(2).unwrap_or(0))
        })
    }
}

/// One counter of a READ field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    pub value: u64,
    pub id: Option<u64>,
    pub lost: Option<u64>,
}

/// READ: the counter (or the group's counters) at the sample, as the words
/// of the field, laid out as `read_format` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadValues<'a> {
    pub read_format: u64,
    pub words: Words<'a>,
}

impl ReadValues<'_> {
    fn has(&self, bit: u64) -> bool {
        self.read_format & bit != 0
    }
    /// Index of the first word after the times (which follow `value` or `nr`).
    fn after_times(&self) -> usize {
        1 + self.has(read::TOTAL_TIME_ENABLED) as usize + self.has(read::TOTAL_TIME_RUNNING) as usize
    }
    pub fn time_enabled(&self) -> Option<u64> {
        self.words.get(1).filter(|_| self.has(read::TOTAL_TIME_ENABLED))
    }
    pub fn time_running(&self) -> Option<u64> {
        self.words.get(1 + self.has(read::TOTAL_TIME_ENABLED) as usize).filter(|_| self.has(read::TOTAL_TIME_RUNNING))
    }
    /// The counters: one, or each of the group's.
    pub fn counters(&self) -> Vec<Counter> {
        let (id, lost) = (self.has(read::ID), self.has(read::LOST));
        let counter = |value: u64, at: usize| Counter {
            value,
            id: self.words.get(at).filter(|_| id),
            lost: self.words.get(at + id as usize).filter(|_| lost),
        };
        let at = self.after_times();
        if !self.has(read::GROUP) {
            return self.words.get(0).map(|v| counter(v, at)).into_iter().collect();
        }
        let stride = 1 + id as usize + lost as usize;
        (at..self.words.len()).step_by(stride).filter_map(|i| Some(counter(self.words.get(i)?, i + 1))).collect()
    }
}

/// One parsed sample. A field is `None` (or empty) when the format does not
/// hold it; variable parts borrow from the record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    /// Which event of the layout (from the id; 0 when not known).
    pub event_index: usize,
    /// The header's misc bits: the CPU mode and more.
    pub misc: u16,
    pub identifier: Option<u64>,
    pub ip: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    pub read: Option<ReadValues<'a>>,
    /// Return addresses, perf's context markers (PERF_CONTEXT_*) included.
    pub callchain: Option<Words<'a>>,
    /// The tracepoint's or BPF output's raw data.
    pub raw: Option<&'a [u8]>,
    pub branches: Option<Branches<'a>>,
    pub regs_user: Option<Regs<'a>>,
    pub stack_user: Option<UserStack<'a>>,
    /// WEIGHT, or WEIGHT_STRUCT's whole word.
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    pub transaction: Option<u64>,
    pub regs_intr: Option<Regs<'a>>,
    pub phys_addr: Option<u64>,
    pub cgroup: Option<u64>,
    pub data_page_size: Option<u64>,
    pub code_page_size: Option<u64>,
    pub aux: Option<&'a [u8]>,
}

impl Sample<'_> {
    /// The CPU mode the sample was taken in, from `misc`.
    pub fn mode(&self) -> CpuMode {
        cpu_mode(self.misc)
    }
}

fn cpu_mode(misc: u16) -> CpuMode {
    match misc & sys::MISC_CPUMODE_MASK {
        1 => CpuMode::Kernel,
        2 => CpuMode::User,
        3 => CpuMode::Hypervisor,
        4 => CpuMode::GuestKernel,
        5 => CpuMode::GuestUser,
        _ => CpuMode::Unknown,
    }
}

/// Parses one whole `PERF_RECORD_SAMPLE` (header included, as a ring hands
/// it out) laid out as `layout` says. Bytes after the last field are
/// ignored; the header's size field is not consulted (the slice is the record).
pub fn parse_sample<'a>(layout: &Layout, rec: &'a [u8]) -> Result<Sample<'a>, SampleError> {
    let mut c = Cursor { b: rec, at: 0 };
    let record_type = c.u32(Field::Header)?;
    let misc = u16::from_ne_bytes(c.take(2, Field::Header)?.try_into().expect("2 bytes"));
    c.take(2, Field::Header)?;
    if record_type != sys::RECORD_SAMPLE {
        return Err(SampleError { kind: SampleErrorKind::NotSample { record_type }, field: Field::Header, offset: 0 });
    }
    let event_index = event_of(layout, rec);
    let format = layout.format_of(event_index);
    let unknown = format.sample_type & !KNOWN_SAMPLE_TYPE;
    if unknown != 0 {
        return Err(SampleError { kind: SampleErrorKind::UnknownSampleType { bits: unknown }, field: Field::Header, offset: 0 });
    }
    let mut s = Sample { event_index, misc, ..Sample::default() };
    fixed_fields(&mut c, format, &mut s)?;
    variable_fields(&mut c, format, &mut s)?;
    trailing_fields(&mut c, format, &mut s)?;
    Ok(s)
}

/// The event a sample is of: its IDENTIFIER (first word) or its ID (after
/// IP, TID, TIME and ADDR) as `layout.format` places it, looked up in `layout.ids`.
fn event_of(layout: &Layout, rec: &[u8]) -> usize {
    let f = &layout.format;
    let at = if f.has(sys::SAMPLE_IDENTIFIER) {
        8
    } else if f.has(sys::SAMPLE_ID) {
        let before = sys::SAMPLE_IP | sys::SAMPLE_TID | sys::SAMPLE_TIME | sys::SAMPLE_ADDR;
        8 + 8 * (f.sample_type & before).count_ones() as usize
    } else {
        return 0;
    };
    let Some(id) = Words(rec.get(at..).unwrap_or_default()).get(0) else { return 0 };
    layout.ids.iter().find(|(i, _)| *i == id).map_or(0, |(_, e)| *e)
}

/// IDENTIFIER through PERIOD, then READ.
fn fixed_fields<'a>(c: &mut Cursor<'a>, f: &Format, s: &mut Sample<'a>) -> Result<(), SampleError> {
    s.identifier = c.opt_u64(f.has(sys::SAMPLE_IDENTIFIER), Field::Identifier)?;
    s.ip = c.opt_u64(f.has(sys::SAMPLE_IP), Field::Ip)?;
    if f.has(sys::SAMPLE_TID) {
        s.pid = Some(c.u32(Field::Tid)?);
        s.tid = Some(c.u32(Field::Tid)?);
    }
    s.time = c.opt_u64(f.has(sys::SAMPLE_TIME), Field::Time)?;
    s.addr = c.opt_u64(f.has(sys::SAMPLE_ADDR), Field::Addr)?;
    s.id = c.opt_u64(f.has(sys::SAMPLE_ID), Field::Id)?;
    s.stream_id = c.opt_u64(f.has(sys::SAMPLE_STREAM_ID), Field::StreamId)?;
    if f.has(sys::SAMPLE_CPU) {
        s.cpu = Some(c.u32(Field::Cpu)?);
        c.u32(Field::Cpu)?; // reserved
    }
    s.period = c.opt_u64(f.has(sys::SAMPLE_PERIOD), Field::Period)?;
    if f.has(sys::SAMPLE_READ) {
        s.read = Some(read_values(c, f.read_format)?);
    }
    Ok(())
}

/// CALLCHAIN through STACK_USER.
fn variable_fields<'a>(c: &mut Cursor<'a>, f: &Format, s: &mut Sample<'a>) -> Result<(), SampleError> {
    if f.has(sys::SAMPLE_CALLCHAIN) {
        let n = c.u64(Field::Callchain)?;
        s.callchain = Some(c.words(n, Field::Callchain)?);
    }
    if f.has(sys::SAMPLE_RAW) {
        let n = c.u32(Field::Raw)?;
        s.raw = Some(c.take(n as usize, Field::Raw)?);
    }
    if f.has(sys::SAMPLE_BRANCH_STACK) {
        s.branches = Some(branch_stack(c, f.branch_sample_type)?);
    }
    if f.has(sys::SAMPLE_REGS_USER) {
        s.regs_user = Some(regs(c, f.regs_user, Field::RegsUser)?);
    }
    if f.has(sys::SAMPLE_STACK_USER) {
        s.stack_user = Some(user_stack(c)?);
    }
    Ok(())
}

/// WEIGHT through AUX.
fn trailing_fields<'a>(c: &mut Cursor<'a>, f: &Format, s: &mut Sample<'a>) -> Result<(), SampleError> {
    s.weight = c.opt_u64(f.has(sys::SAMPLE_WEIGHT | sys::SAMPLE_WEIGHT_STRUCT), Field::Weight)?;
    s.data_src = c.opt_u64(f.has(sys::SAMPLE_DATA_SRC), Field::DataSrc)?;
    s.transaction = c.opt_u64(f.has(sys::SAMPLE_TRANSACTION), Field::Transaction)?;
    if f.has(sys::SAMPLE_REGS_INTR) {
        s.regs_intr = Some(regs(c, f.regs_intr, Field::RegsIntr)?);
    }
    s.phys_addr = c.opt_u64(f.has(sys::SAMPLE_PHYS_ADDR), Field::PhysAddr)?;
    s.cgroup = c.opt_u64(f.has(sys::SAMPLE_CGROUP), Field::Cgroup)?;
    s.data_page_size = c.opt_u64(f.has(sys::SAMPLE_DATA_PAGE_SIZE), Field::DataPageSize)?;
    s.code_page_size = c.opt_u64(f.has(sys::SAMPLE_CODE_PAGE_SIZE), Field::CodePageSize)?;
    if f.has(sys::SAMPLE_AUX) {
        let n = c.u64(Field::Aux)?;
        s.aux = Some(c.take_u64(n, Field::Aux)?);
    }
    Ok(())
}

/// READ: one counter (value, enabled, running, id, lost) or a group
/// (nr, enabled, running, then nr x {value, id, lost}).
fn read_values<'a>(c: &mut Cursor<'a>, rf: u64) -> Result<ReadValues<'a>, SampleError> {
    let start = c.at;
    let first = c.u64(Field::Read)?;
    let bit = |b: u64| (rf & b != 0) as u64;
    let (times, per_counter) = (bit(read::TOTAL_TIME_ENABLED) + bit(read::TOTAL_TIME_RUNNING), 1 + bit(read::ID) + bit(read::LOST));
    let rest = match rf & read::GROUP {
        0 => times + per_counter - 1,
        _ => first.saturating_mul(per_counter).saturating_add(times),
    };
    c.words(rest, Field::Read)?;
    Ok(ReadValues { read_format: rf, words: Words(&c.b[start..c.at]) })
}

/// BRANCH_STACK: `nr`, `hw_idx` (HW_INDEX), `nr` x {from, to, flags},
/// then `nr` counter words (COUNTERS).
fn branch_stack<'a>(c: &mut Cursor<'a>, bst: u64) -> Result<Branches<'a>, SampleError> {
    let nr = c.u64(Field::BranchStack)?;
    let hw_index = c.opt_u64(bst & sys::branch::HW_INDEX != 0, Field::BranchStack)?;
    let entries = c.words(nr.saturating_mul(3), Field::BranchStack)?;
    let counters = if bst & sys::branch::COUNTERS != 0 { Some(c.words(nr, Field::BranchStack)?) } else { None };
    Ok(Branches { hw_index, entries, counters })
}

/// REGS_USER or REGS_INTR: `abi`, then the registers of `mask` unless abi is 0.
fn regs<'a>(c: &mut Cursor<'a>, mask: u64, field: Field) -> Result<Regs<'a>, SampleError> {
    let offset = c.at;
    let abi = c.u64(field)?;
    if abi > 2 {
        return Err(SampleError { kind: SampleErrorKind::BadAbi { abi }, field, offset });
    }
    let n = if abi == 0 { 0 } else { mask.count_ones() as u64 };
    Ok(Regs { abi, mask, values: c.words(n, field)? })
}

/// STACK_USER: `size`, then (when size != 0) `size` bytes and the dynamic size.
fn user_stack<'a>(c: &mut Cursor<'a>) -> Result<UserStack<'a>, SampleError> {
    let size = c.u64(Field::StackUser)?;
    if size == 0 {
        return Ok(UserStack::default());
    }
    let data = c.take_u64(size, Field::StackUser)?;
    Ok(UserStack { data, dyn_size: c.u64(Field::StackUser)? })
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: Field) -> Result<&'a [u8], SampleError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or(SampleError { kind: SampleErrorKind::Truncated, field, offset: self.at })?;
        let v = &self.b[self.at..end];
        self.at = end;
        Ok(v)
    }
    fn take_u64(&mut self, n: u64, field: Field) -> Result<&'a [u8], SampleError> {
        self.take(usize::try_from(n).unwrap_or(usize::MAX), field)
    }
    fn u32(&mut self, field: Field) -> Result<u32, SampleError> {
        Ok(u32::from_ne_bytes(self.take(4, field)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, field: Field) -> Result<u64, SampleError> {
        Ok(u64::from_ne_bytes(self.take(8, field)?.try_into().expect("8 bytes")))
    }
    fn opt_u64(&mut self, present: bool, field: Field) -> Result<Option<u64>, SampleError> {
        if present {
            self.u64(field).map(Some)
        } else {
            Ok(None)
        }
    }
    /// `n` u64 words.
    fn words(&mut self, n: u64, field: Field) -> Result<Words<'a>, SampleError> {
        self.take_u64(n.saturating_mul(8), field).map(Words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::*;

    /// A sample record written field by field as `perf_output_sample` does,
    /// remembering where each field starts.
    struct Rec {
        b: Vec<u8>,
        fields: Vec<(usize, Field)>,
    }

    impl Rec {
        fn new(misc: u16) -> Rec {
            let mut b = Vec::new();
            b.extend(RECORD_SAMPLE.to_ne_bytes());
            b.extend(misc.to_ne_bytes());
            b.extend(0u16.to_ne_bytes());
            Rec { b, fields: vec![(0, Field::Header)] }
        }
        fn words(mut self, f: Field, words: &[u64]) -> Rec {
            self.fields.push((self.b.len(), f));
            words.iter().for_each(|w| self.b.extend(w.to_ne_bytes()));
            self
        }
        /// Two u32s (TID: pid, tid; CPU: cpu, reserved).
        fn pair(mut self, f: Field, a: u32, b: u32) -> Rec {
            self.fields.push((self.b.len(), f));
            self.b.extend(a.to_ne_bytes());
            self.b.extend(b.to_ne_bytes());
            self
        }
        fn raw(mut self, data: &[u8]) -> Rec {
            self.fields.push((self.b.len(), Field::Raw));
            self.b.extend((data.len() as u32).to_ne_bytes());
            self.b.extend(data);
            self
        }
        /// STACK_USER, or AUX when `dyn_size` is None.
        fn sized(mut self, f: Field, data: &[u8], dyn_size: Option<u64>) -> Rec {
            self.fields.push((self.b.len(), f));
            self.b.extend((data.len() as u64).to_ne_bytes());
            self.b.extend(data);
            if let Some(d) = dyn_size {
                self.b.extend(d.to_ne_bytes());
            }
            self
        }
        fn done(mut self) -> Rec {
            let size = self.b.len() as u16;
            self.b[6..8].copy_from_slice(&size.to_ne_bytes());
            self
        }
    }

    /// Every proper prefix of `rec` is a truncation error in the field the
    /// cut falls in (at a field's first byte: that field), never a sample.
    fn every_cut_is_truncated(layout: &Layout, rec: &Rec) {
        for n in 0..rec.b.len() {
            let e = parse_sample(layout, &rec.b[..n]).expect_err("a cut record");
            let want = rec.fields.iter().rev().find(|(at, _)| *at <= n).expect("header at 0").1;
            assert_eq!((e.kind(), e.field()), (SampleErrorKind::Truncated, want), "cut at byte {n} of {}", rec.b.len());
            assert!(e.offset() <= n, "cut at {n}, error at {}", e.offset());
        }
    }

    const COLLECTOR: u64 = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_PERIOD;

    fn collector_rec(chain: &[u64], branches: &[u64], stack: &[u8]) -> Rec {
        let rec = Rec::new(2).words(Field::Identifier, &[9]).words(Field::Ip, &[0x401000]).pair(Field::Tid, 42, 43);
        let rec = rec.words(Field::Time, &[1234]).pair(Field::Cpu, 3, 0).words(Field::Period, &[250_000]);
        let rec = rec.words(Field::Callchain, &[&[chain.len() as u64], chain].concat());
        let rec = rec.words(Field::BranchStack, branches).words(Field::RegsUser, &[2, 0x7ffd_0010, 0x7ffd_0000, 0x401000]);
        rec.sized(Field::StackUser, stack, Some(12)).done()
    }

    #[test]
    fn collector_sample_with_chain_branches_registers_and_stack() {
        // Checks the sampler's fullest format (IDENTIFIER, IP, TID, TIME, CPU, PERIOD, CALLCHAIN, BRANCH_STACK,
        // REGS_USER of BP/SP/IP, STACK_USER) field by field, and every cut of it.
        let sample_type = COLLECTOR | SAMPLE_CALLCHAIN | SAMPLE_BRANCH_STACK | SAMPLE_REGS_USER | SAMPLE_STACK_USER;
        let format = Format { sample_type, regs_user: USER_REGS_MASK, ..Format::default() };
        let layout = Layout { ids: vec![(5, 0), (9, 1)], ..Layout::new(format) };
        let chain = [(-512i64) as u64, 0x401000, 0x402000];
        let branches = [2, 0x401005, 0x401040, 1 | (37 << 4), 0x402000, 0x401000, 2 | 4 | 8 | (0xffff << 4)];
        let rec = collector_rec(&chain, &branches, &(0u8..16).collect::<Vec<u8>>());
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.event_index, s.identifier, s.ip, s.pid, s.tid), (1, Some(9), Some(0x401000), Some(42), Some(43)));
        assert_eq!((s.time, s.cpu, s.period, s.mode()), (Some(1234), Some(3), Some(250_000), CpuMode::User));
        assert_eq!(s.callchain.unwrap().iter().collect::<Vec<u64>>(), chain);
        let b = s.branches.unwrap();
        let e0 = BranchEntry { from: 0x401005, to: 0x401040, mispredicted: true, predicted: false, in_tx: false, abort: false, cycles: 37 };
        let e1 =
            BranchEntry { from: 0x402000, to: 0x401000, mispredicted: false, predicted: true, in_tx: true, abort: true, cycles: 65535 };
        assert_eq!((b.len(), b.hw_index, b.counters), (2, None, None));
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![e0, e1]);
        let r = s.regs_user.unwrap();
        assert_eq!((r.get(REG_BP), r.get(REG_SP), r.get(REG_IP), r.get(0)), (Some(0x7ffd_0010), Some(0x7ffd_0000), Some(0x401000), None));
        let st = s.stack_user.unwrap();
        assert_eq!((st.data.len(), st.valid()), (16, &(0u8..12).collect::<Vec<u8>>()[..]));
        assert_eq!((s.addr, s.raw, s.weight), (None, None, None));
        every_cut_is_truncated(&layout, &rec);
    }

    #[test]
    fn collector_sample_without_stacks_and_an_empty_stack_copy() {
        // Checks the plain format (no CALLCHAIN: PERIOD is the last field), and STACK_USER of size 0 (no data,
        // no dynamic size) with REGS_USER abi 0 (no registers, as for a kernel thread).
        let layout = Layout::new(Format::new(COLLECTOR));
        let rec = Rec::new(1).words(Field::Identifier, &[1]).words(Field::Ip, &[0xffff_ffff_8100_0000]).pair(Field::Tid, 0, 0);
        let rec = rec.words(Field::Time, &[5]).pair(Field::Cpu, 1, 0).words(Field::Period, &[1_000_000]).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.ip, s.period, s.mode(), s.callchain), (Some(0xffff_ffff_8100_0000), Some(1_000_000), CpuMode::Kernel, None));
        every_cut_is_truncated(&layout, &rec);
        let f = Format { sample_type: SAMPLE_REGS_USER | SAMPLE_STACK_USER, regs_user: USER_REGS_MASK, ..Format::default() };
        let rec = Rec::new(1).words(Field::RegsUser, &[0]).words(Field::StackUser, &[0]).done();
        let s = parse_sample(&Layout::new(f), &rec.b).unwrap();
        assert_eq!((s.regs_user.unwrap().values.len(), s.regs_user.unwrap().get(REG_IP)), (0, None));
        assert_eq!(s.stack_user, Some(UserStack::default()));
        every_cut_is_truncated(&Layout::new(f), &rec);
    }

    #[test]
    fn ip_only_sample() {
        // Checks the probe's format (IP alone): the IP follows the header.
        let layout = Layout::new(Format::new(SAMPLE_IP));
        let rec = Rec::new(2).words(Field::Ip, &[0x401234]).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.ip, s.pid, s.time, s.event_index), (Some(0x401234), None, None, 0));
        every_cut_is_truncated(&layout, &rec);
    }

    #[test]
    fn breakpoint_sample() {
        // Checks the data breakpoints' format (IP, TID, TIME, CPU), cpu's reserved half skipped.
        let layout = Layout::new(Format::new(SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU));
        let rec = Rec::new(2).words(Field::Ip, &[0x401234]).pair(Field::Tid, 10, 11).words(Field::Time, &[999]).pair(Field::Cpu, 1, 77);
        let rec = rec.done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.ip, s.pid, s.tid, s.time, s.cpu), (Some(0x401234), Some(10), Some(11), Some(999), Some(1)));
        every_cut_is_truncated(&layout, &rec);
    }

    #[test]
    fn memory_access_samples_with_many_registers() {
        // Checks the data profiler's formats: timer (IP, TID, TIME, CPU, REGS_USER of 17 registers) and PMU
        // (ADDR after TIME; WEIGHT and DATA_SRC after the registers).
        let mask = 0x1ff | (0xff << 16);
        let timer = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_REGS_USER;
        let layout = Layout::new(Format { sample_type: timer, regs_user: mask, ..Format::default() });
        let regs: Vec<u64> = [2].into_iter().chain(100..117).collect();
        let rec = Rec::new(2).words(Field::Ip, &[0x401000]).pair(Field::Tid, 7, 8).words(Field::Time, &[123_456]).pair(Field::Cpu, 1, 0);
        let rec = rec.words(Field::RegsUser, &regs).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        let r = s.regs_user.unwrap();
        assert_eq!(
            (r.abi, r.values.len(), r.get(0), r.get(8), r.get(9), r.get(16), r.get(23)),
            (2, 17, Some(100), Some(108), None, Some(109), Some(116))
        );
        every_cut_is_truncated(&layout, &rec);
        let pmu = timer | SAMPLE_ADDR | SAMPLE_WEIGHT | SAMPLE_DATA_SRC;
        let layout = Layout::new(Format { sample_type: pmu, regs_user: mask, ..Format::default() });
        let rec =
            Rec::new(2).words(Field::Ip, &[0x401000]).pair(Field::Tid, 3, 4).words(Field::Time, &[99]).words(Field::Addr, &[0xdead_b000]);
        let rec =
            rec.pair(Field::Cpu, 0, 0).words(Field::RegsUser, &regs).words(Field::Weight, &[250]).words(Field::DataSrc, &[0x1234]).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.addr, s.weight, s.data_src, s.regs_user.unwrap().get(8)), (Some(0xdead_b000), Some(250), Some(0x1234), Some(108)));
        every_cut_is_truncated(&layout, &rec);
    }

    #[test]
    fn tracepoint_sample_with_raw_data() {
        // Checks the trace layer's format (IDENTIFIER, IP, TID, TIME, ADDR, RAW): raw size then bytes, borrowed.
        let layout = Layout::new(Format::new(SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_RAW));
        let raw: Vec<u8> = (1..=20).collect();
        let rec = Rec::new(0).words(Field::Identifier, &[7]).words(Field::Ip, &[0x401000]).pair(Field::Tid, 108, 8);
        let rec = rec.words(Field::Time, &[123]).words(Field::Addr, &[0x7f00_0000_1000]).raw(&raw).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.identifier, s.pid, s.tid, s.addr), (Some(7), Some(108), Some(8), Some(0x7f00_0000_1000)));
        assert_eq!(s.raw, Some(&raw[..]));
        every_cut_is_truncated(&layout, &rec);
    }

    #[test]
    fn every_field_in_the_kernels_order() {
        // Checks one record holding every field this parser knows (WEIGHT_STRUCT for WEIGHT, READ with every
        // read_format bit but GROUP, a branch stack with hw_idx and counters, interrupt registers), and every cut.
        let rf = read::TOTAL_TIME_ENABLED | read::TOTAL_TIME_RUNNING | read::ID | read::LOST;
        let format = Format {
            sample_type: KNOWN_SAMPLE_TYPE & !SAMPLE_WEIGHT,
            read_format: rf,
            branch_sample_type: branch::ANY | branch::HW_INDEX | branch::COUNTERS,
            regs_user: USER_REGS_MASK,
            regs_intr: 1 << REG_IP,
        };
        let layout = Layout::new(format);
        let rec = Rec::new(2).words(Field::Identifier, &[1]).words(Field::Ip, &[2]).pair(Field::Tid, 3, 4).words(Field::Time, &[5]);
        let rec = rec.words(Field::Addr, &[6]).words(Field::Id, &[7]).words(Field::StreamId, &[8]).pair(Field::Cpu, 9, 0);
        let rec = rec.words(Field::Period, &[10]).words(Field::Read, &[11, 12, 13, 14, 15]).words(Field::Callchain, &[1, 16]);
        let rec = rec.raw(&[17; 4]).words(Field::BranchStack, &[1, 18, 19, 20, 21, 22]).words(Field::RegsUser, &[2, 23, 24, 25]);
        let rec = rec.sized(Field::StackUser, &[26; 8], Some(8)).words(Field::Weight, &[27]).words(Field::DataSrc, &[28]);
        let rec = rec.words(Field::Transaction, &[29]).words(Field::RegsIntr, &[1, 30]).words(Field::PhysAddr, &[31]);
        let rec = rec.words(Field::Cgroup, &[32]).words(Field::DataPageSize, &[33]).words(Field::CodePageSize, &[34]);
        let rec = rec.sized(Field::Aux, &[35; 16], None).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!(
            (s.identifier, s.ip, s.pid, s.tid, s.time, s.addr, s.id),
            (Some(1), Some(2), Some(3), Some(4), Some(5), Some(6), Some(7))
        );
        assert_eq!((s.stream_id, s.cpu, s.period), (Some(8), Some(9), Some(10)));
        let read = s.read.unwrap();
        assert_eq!((read.time_enabled(), read.time_running()), (Some(12), Some(13)));
        assert_eq!(read.counters(), vec![Counter { value: 11, id: Some(14), lost: Some(15) }]);
        assert_eq!((s.callchain.unwrap().iter().collect::<Vec<_>>(), s.raw), (vec![16], Some(&[17u8; 4][..])));
        let b = s.branches.unwrap();
        assert_eq!((b.hw_index, b.iter().map(|e| (e.from, e.to)).collect::<Vec<_>>()), (Some(18), vec![(19, 20)]));
        assert_eq!(b.counters.unwrap().iter().collect::<Vec<_>>(), vec![22]);
        assert_eq!((s.regs_user.unwrap().get(REG_SP), s.stack_user.unwrap().valid()), (Some(24), &[26u8; 8][..]));
        assert_eq!((s.weight, s.data_src, s.transaction, s.regs_intr.unwrap().get(REG_IP)), (Some(27), Some(28), Some(29), Some(30)));
        assert_eq!((s.phys_addr, s.cgroup, s.data_page_size, s.code_page_size), (Some(31), Some(32), Some(33), Some(34)));
        assert_eq!(s.aux, Some(&[35u8; 16][..]));
        every_cut_is_truncated(&layout, &rec);
    }

    #[test]
    fn group_read_values() {
        // Checks READ with GROUP: nr, both times, then {value, id} per counter (LOST not asked).
        let f = Format { sample_type: SAMPLE_READ, read_format: read::GROUP | read::ID | 3, ..Format::default() };
        let rec = Rec::new(2).words(Field::Read, &[2, 100, 90, 7, 70, 8, 80]).done();
        let read = parse_sample(&Layout::new(f), &rec.b).unwrap().read.unwrap();
        assert_eq!((read.time_enabled(), read.time_running()), (Some(100), Some(90)));
        let c = |value, id| Counter { value, id: Some(id), lost: None };
        assert_eq!(read.counters(), vec![c(7, 70), c(8, 80)]);
        every_cut_is_truncated(&Layout::new(f), &rec);
    }

    #[test]
    fn the_id_picks_the_events_format() {
        // Checks that a sample's IDENTIFIER (or, without one, its ID after IP and TID) selects its event and that
        // event's own format: event 1 has a branch stack, event 0 does not; an unknown id is event 0.
        let plain = Format::new(SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_REGS_USER);
        let branchy = Format::new(plain.sample_type | SAMPLE_BRANCH_STACK);
        let layout = Layout { format: plain, per_event: vec![(1, branchy)], ids: vec![(50, 0), (90, 1)] };
        let rec = Rec::new(2).words(Field::Identifier, &[90]).words(Field::Ip, &[1]).words(Field::BranchStack, &[1, 2, 3, 4]);
        let rec = rec.words(Field::RegsUser, &[0]).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.event_index, s.branches.map(|b| b.len())), (1, Some(1)));
        every_cut_is_truncated(&layout, &rec);
        for id in [50, 51] {
            let rec = Rec::new(2).words(Field::Identifier, &[id]).words(Field::Ip, &[1]).words(Field::RegsUser, &[0]).done();
            let s = parse_sample(&layout, &rec.b).unwrap();
            assert_eq!((s.event_index, s.branches, s.regs_user.map(|r| r.abi)), (0, None, Some(0)));
        }
        let plain = Format::new(SAMPLE_IP | SAMPLE_TID | SAMPLE_ID);
        let layout = Layout { format: plain, per_event: vec![(1, Format::new(plain.sample_type | SAMPLE_PERIOD))], ids: vec![(90, 1)] };
        let rec = Rec::new(2).words(Field::Ip, &[1]).pair(Field::Tid, 2, 3).words(Field::Id, &[90]).words(Field::Period, &[4]).done();
        let s = parse_sample(&layout, &rec.b).unwrap();
        assert_eq!((s.event_index, s.id, s.period), (1, Some(90), Some(4)));
    }

    #[test]
    fn malformed_records_are_typed_errors() {
        // Checks the errors other than truncation: another record type, unknown sample_type bits, a register
        // ABI the kernel never writes; and counts far past the record's end (callchain, raw, branches, group
        // read, stack, aux) are truncations, not allocations or panics.
        let ip = Layout::new(Format::new(SAMPLE_IP));
        let mut rec = Rec::new(2).words(Field::Ip, &[1]).done().b;
        rec[0] = RECORD_LOST as u8;
        assert_eq!(parse_sample(&ip, &rec).unwrap_err().kind(), SampleErrorKind::NotSample { record_type: RECORD_LOST });
        let rec = Rec::new(2).words(Field::Ip, &[1]).done().b;
        let unknown = Layout::new(Format::new(SAMPLE_IP | 1 << 40));
        assert_eq!(parse_sample(&unknown, &rec).unwrap_err().kind(), SampleErrorKind::UnknownSampleType { bits: 1 << 40 });
        let regs = Layout::new(Format { sample_type: SAMPLE_REGS_USER, regs_user: 1, ..Format::default() });
        let e = parse_sample(&regs, &Rec::new(2).words(Field::RegsUser, &[3, 0]).done().b).unwrap_err();
        assert_eq!((e.kind(), e.field(), e.offset()), (SampleErrorKind::BadAbi { abi: 3 }, Field::RegsUser, 8));
        let read = Format { read_format: read::GROUP | read::ID | read::LOST, ..Format::new(SAMPLE_READ) };
        let cases = [
            (Format::new(SAMPLE_CALLCHAIN), Field::Callchain),
            (Format::new(SAMPLE_BRANCH_STACK), Field::BranchStack),
            (read, Field::Read),
            (Format::new(SAMPLE_STACK_USER), Field::StackUser),
            (Format::new(SAMPLE_AUX), Field::Aux),
        ];
        for (f, field) in cases {
            for n in [u64::MAX, u64::MAX / 3 + 1, 1 << 61, 1_000_000] {
                let e = parse_sample(&Layout::new(f), &Rec::new(2).words(field, &[n, 0, 0]).done().b).unwrap_err();
                assert_eq!((e.kind(), e.field()), (SampleErrorKind::Truncated, field), "{field:?} count {n}");
            }
        }
        let raw = Layout::new(Format::new(SAMPLE_RAW));
        let e = parse_sample(&raw, &Rec::new(2).raw(&[0; 8]).done().b[..12]).unwrap_err();
        assert_eq!((e.kind(), e.field()), (SampleErrorKind::Truncated, Field::Raw));
    }

    #[test]
    fn stack_dynamic_size_past_the_copy_is_clamped() {
        // Checks that a dynamic size larger than the copy (the kernel never writes one) keeps to the copy.
        let f = Format::new(SAMPLE_STACK_USER);
        let rec = Rec::new(2).sized(Field::StackUser, &[1, 2, 3, 4, 5, 6, 7, 8], Some(1 << 40)).done();
        assert_eq!(parse_sample(&Layout::new(f), &rec.b).unwrap().stack_user.unwrap().valid(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // Checks parse_sample on 20,000 pseudo-random records (lengths 0..200, small words so counts often fit)
        // under every known field: each is a sample or an error, and an error lies inside the record.
        let format = Format {
            sample_type: KNOWN_SAMPLE_TYPE,
            read_format: 0x1f,
            branch_sample_type: branch::HW_INDEX | branch::COUNTERS,
            regs_user: 0xff,
            regs_intr: 0x3,
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let len = (next() % 200) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| (next() % 4) as u8).collect();
            if len >= 4 {
                b[..4].copy_from_slice(&RECORD_SAMPLE.to_ne_bytes());
            }
            let f = Format { sample_type: format.sample_type & next(), ..format };
            if let Err(e) = parse_sample(&Layout::new(f), &b) {
                assert!(e.offset() <= b.len(), "record {i}");
            }
        }
    }
}
