//! The row format: one row per (time bucket, host, labels, process, image,
//! event, offset) with its count, and the batch it was sent in. A batch is
//! what one flush merged; its id and each row's index in it make every row
//! unique, so a batch delivered twice (a retry after a timeout that in fact
//! landed) is counted once by queries, which take `any(count)` per
//! `(batch_id, row)` before summing ([`crate::query`]).

use loupe_model::stacks::StackProfile;
use loupe_model::{ImageId, ImageKind, Profile};
use serde::{Deserialize, Serialize};

/// Width of a time bucket in seconds: a row's `bucket` is its flush time
/// rounded down to this.
pub const BUCKET_SECONDS: u64 = 60;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub bucket: u64,
    pub host: String,
    pub label_keys: Vec<String>,
    pub label_values: Vec<String>,
    pub pid: u32,
    pub comm: String,
    pub kind: String,
    pub image: String,
    pub build_id: String,
    pub content_hash: u64,
    pub event: String,
    pub offset: u64,
    pub count: u64,
}

/// The name of one offset of one build, as the shipping host's symbolizer
/// gave it: uploaded once per (build, offset), so a query host names
/// frames of binaries it never saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymRow {
    /// [`image_key`] of the image.
    pub image_key: String,
    pub offset: u64,
    pub procedure: String,
    pub file: String,
    /// 0: no line.
    pub line: u32,
}

/// One distinct call stack, stored once per [`stack_hash`]: its frames,
/// leaf first, as parallel arrays (image kind, path, build-id, content
/// hash, offset), so a query host rebuilds each frame's image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackDef {
    pub stack: u64,
    pub kinds: Vec<String>,
    pub images: Vec<String>,
    pub build_ids: Vec<String>,
    pub content_hashes: Vec<u64>,
    pub offsets: Vec<u64>,
}

impl StackDef {
    /// The frames as (image, offset), leaf first.
    pub fn frames(&self) -> Vec<(ImageId, u64)> {
        (0..self.offsets.len())
            .map(|i| {
                let at = |v: &[String]| v.get(i).cloned().unwrap_or_default();
                let image =
                    image_of(&at(&self.kinds), &at(&self.images), &at(&self.build_ids), self.content_hashes.get(i).copied().unwrap_or(0));
                (image, self.offsets[i])
            })
            .collect()
    }
}

/// Samples of one stack in one process, time bucket and event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackRow {
    pub bucket: u64,
    pub host: String,
    pub label_keys: Vec<String>,
    pub label_values: Vec<String>,
    pub pid: u32,
    pub comm: String,
    pub event: String,
    pub stack: u64,
    pub count: u64,
    /// The sum of sample periods of the event's stacks in this flush, on
    /// the flush's first row of the event (0 on the others), so sums over
    /// any selection keep the mean period.
    pub period: u64,
}

/// Rows sent (and spooled) together under one id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub id: String,
    pub rows: Vec<Row>,
    /// Names of offsets first seen in this batch.
    #[serde(default)]
    pub symbols: Vec<SymRow>,
    /// Stacks this shipper has not sent before (a query takes one copy per hash).
    #[serde(default)]
    pub stacks: Vec<StackDef>,
    /// Samples per stack; deduplicated by (batch id, index) like `rows`.
    #[serde(default)]
    pub stack_rows: Vec<StackRow>,
}

/// The row as sent: the row and its place in the batch.
#[derive(Serialize)]
struct Wire<'a, T> {
    #[serde(flatten)]
    row: &'a T,
    batch_id: &'a str,
    row_index: u32,
}

impl Batch {
    /// A batch with a fresh random id.
    pub fn new(rows: Vec<Row>) -> Batch {
        Batch { id: random_id(), rows, symbols: Vec::new(), stacks: Vec::new(), stack_rows: Vec::new() }
    }

    /// The stack definitions as JSONEachRow for `INSERT INTO stacks`.
    pub fn stacks_json(&self) -> String {
        self.stacks.iter().map(|s| serde_json::to_string(s).expect("stacks serialize") + "\n").collect()
    }

    /// The stack counts as JSONEachRow for `INSERT INTO stack_counts`, each with the batch id and its index.
    pub fn stack_rows_json(&self) -> String {
        wire_lines(&self.id, &self.stack_rows)
    }

    /// The symbol rows as JSONEachRow for `INSERT INTO symbols`.
    pub fn symbols_json(&self) -> String {
        self.symbols.iter().map(|s| serde_json::to_string(s).expect("symbols serialize") + "\n").collect()
    }

    pub fn samples(&self) -> u64 {
        self.rows.iter().map(|r| r.count).sum()
    }

    /// JSONEachRow for `INSERT INTO samples`.
    pub fn to_json_rows(&self) -> String {
        wire_lines(&self.id, &self.rows)
    }
}

/// Rows as JSONEachRow lines, each with the batch id and its index as `row`.
fn wire_lines<T: Serialize>(id: &str, rows: &[T]) -> String {
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let w = Wire { row, batch_id: id, row_index: i as u32 };
        let mut line = serde_json::to_string(&w).expect("rows serialize");
        // The column is `row`; the struct field cannot share the flattened name.
        line = line.replacen("\"row_index\":", "\"row\":", 1);
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// 128 random bits as hex: batch ids never repeat across hosts and restarts.
fn random_id() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most b.len() bytes into the buffer we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // No entropy source: time and pid still make ids unique per host.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        b.copy_from_slice(&(t ^ ((std::process::id() as u128) << 96)).to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What every row of a host carries besides its process's own labels.
#[derive(Clone, Debug, Default)]
pub struct RowContext {
    pub host: String,
    pub labels: Vec<(String, String)>,
}

impl RowContext {
    /// A row's label columns: the host's labels, then its process's.
    fn label_columns(&self, process: Vec<(String, String)>) -> (Vec<String>, Vec<String>) {
        self.labels.iter().cloned().chain(process).unzip()
    }
}

/// The rows of one flush's profiles. `process_labels` gives labels per pid
/// (from its cgroup); they follow the host's own.
pub fn rows_of(
    profiles: &[Profile],
    bucket: u64,
    ctx: &RowContext,
    process_labels: &mut dyn FnMut(u32) -> Vec<(String, String)>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for p in profiles {
        for (&(proc_index, offset), &count) in &p.entries {
            let Some(proc_) = p.processes.get(proc_index as usize) else { continue };
            let (label_keys, label_values) = ctx.label_columns(process_labels(proc_.pid));
            rows.push(Row {
                bucket: bucket / BUCKET_SECONDS * BUCKET_SECONDS,
                host: ctx.host.clone(),
                label_keys,
                label_values,
                pid: proc_.pid,
                comm: proc_.comm.clone(),
                kind: kind_name(p.image.kind).to_string(),
                image: p.image.path.clone(),
                build_id: p.image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default(),
                content_hash: p.image.content_hash.unwrap_or(0),
                event: p.event.0.clone(),
                offset: offset.0,
                count,
            });
        }
    }
    rows
}

/// A stack's identity, the same on every host and run: FNV-1a (64 bits)
/// over each frame's image kind, path, build-id, content hash and offset.
pub fn stack_hash(frames: &[(&ImageId, u64)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (image, offset) in frames {
        eat(kind_name(image.kind).as_bytes());
        eat(&[0]);
        eat(image.path.as_bytes());
        eat(&[0]);
        eat(image.build_id.as_ref().map(|b| b.0.as_slice()).unwrap_or_default());
        eat(&[0]);
        eat(&image.content_hash.unwrap_or(0).to_le_bytes());
        eat(&offset.to_le_bytes());
    }
    h
}

/// A stack's definition row.
pub fn stack_def(frames: &[(&ImageId, u64)]) -> StackDef {
    StackDef {
        stack: stack_hash(frames),
        kinds: frames.iter().map(|(i, _)| kind_name(i.kind).to_string()).collect(),
        images: frames.iter().map(|(i, _)| i.path.clone()).collect(),
        build_ids: frames.iter().map(|(i, _)| i.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default()).collect(),
        content_hashes: frames.iter().map(|(i, _)| i.content_hash.unwrap_or(0)).collect(),
        offsets: frames.iter().map(|(_, o)| *o).collect(),
    }
}

/// The stack rows of one flush's stack tables, and the definitions of the
/// stacks `known` does not hold yet (which are then added to it).
pub fn stack_rows_of(
    tables: &[StackProfile],
    bucket: u64,
    ctx: &RowContext,
    process_labels: &mut dyn FnMut(u32) -> Vec<(String, String)>,
    known: &mut std::collections::HashSet<u64>,
) -> (Vec<StackRow>, Vec<StackDef>) {
    let (mut rows, mut defs) = (Vec::new(), Vec::new());
    for t in tables {
        let hashes: Vec<u64> = (0..t.stacks.len() as u32)
            .map(|s| {
                let frames: Vec<(&ImageId, u64)> = t.stack(s).map(|(i, o)| (i, o.0)).collect();
                let h = stack_hash(&frames);
                if known.insert(h) {
                    defs.push(stack_def(&frames));
                }
                h
            })
            .collect();
        let mut period = t.period_sum;
        for (&(p, s), &count) in &t.counts {
            let Some(proc_) = t.processes.get(p as usize) else { continue };
            let (label_keys, label_values) = ctx.label_columns(process_labels(proc_.pid));
            rows.push(StackRow {
                bucket: bucket / BUCKET_SECONDS * BUCKET_SECONDS,
                host: ctx.host.clone(),
                label_keys,
                label_values,
                pid: proc_.pid,
                comm: proc_.comm.clone(),
                event: t.event.0.clone(),
                stack: hashes[s as usize],
                count,
                period: std::mem::take(&mut period),
            });
        }
    }
    (rows, defs)
}

/// What names a build for the symbols table: its build-id, else its content hash.
pub fn image_key(image: &ImageId) -> Option<String> {
    match (&image.build_id, image.content_hash) {
        (Some(b), _) if !b.0.is_empty() => Some(b.to_hex()),
        (_, Some(h)) => Some(format!("h{h:016x}")),
        _ => None,
    }
}

pub fn kind_name(k: ImageKind) -> &'static str {
    match k {
        ImageKind::Elf => "elf",
        ImageKind::Kernel => "kernel",
        ImageKind::KernelModule => "module",
        ImageKind::Vdso => "vdso",
        ImageKind::Anonymous => "anon",
        ImageKind::Unknown => "unknown",
    }
}

/// The image a row names, as the local database would.
pub fn image_of(kind: &str, path: &str, build_id: &str, content_hash: u64) -> ImageId {
    let kind = match kind {
        "elf" => ImageKind::Elf,
        "kernel" => ImageKind::Kernel,
        "module" => ImageKind::KernelModule,
        "vdso" => ImageKind::Vdso,
        "anon" => ImageKind::Anonymous,
        _ => ImageKind::Unknown,
    };
    let build_id = if build_id.is_empty() { None } else { loupe_model::BuildId::from_hex(build_id) };
    ImageId { kind, path: path.to_string(), build_id, content_hash: (content_hash != 0).then_some(content_hash) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::{EventName, ImageOffset, ProcessKey};

    #[test]
    fn profiles_become_rows_with_labels_and_images_round_trip() {
        // Checks one row per (process, offset) with host, host and process labels, and that the image comes back intact.
        let image = ImageId::elf("/usr/bin/x", loupe_model::BuildId::from_hex("abcd"));
        let mut p = Profile::new(image.clone(), EventName::new("cpu-clock"));
        p.add(ProcessKey::new(7, "x"), ImageOffset(0x10), 3, 0);
        p.add(ProcessKey::new(8, "y"), ImageOffset(0x20), 4, 0);
        let ctx = RowContext { host: "h1".into(), labels: vec![("version".into(), "1.2".into())] };
        let rows = rows_of(&[p], 125, &ctx, &mut |pid| vec![("unit".into(), format!("u{pid}.service"))]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 7);
        let r = rows.iter().find(|r| r.pid == 8).unwrap();
        assert_eq!((r.bucket, r.offset, r.comm.as_str(), r.host.as_str()), (120, 0x20, "y", "h1"));
        assert_eq!(r.label_keys, ["version", "unit"]);
        assert_eq!(r.label_values, ["1.2", "u8.service"]);
        assert_eq!(image_of(&r.kind, &r.image, &r.build_id, r.content_hash), image);
    }

    #[test]
    fn stacks_become_rows_and_each_definition_is_sent_once() {
        // Checks one row per (process, stack) with its count, the period on one row, hashes that ignore table order, and definitions only for unknown hashes.
        use loupe_model::stacks::StackProfile;
        let (a, b) = (ImageId::elf("/a", None), ImageId::elf("/b", loupe_model::BuildId::from_hex("beef")));
        let st = [(a.clone(), ImageOffset(1)), (b.clone(), ImageOffset(2))];
        let mut t = StackProfile::new(EventName::new("cpu-clock"));
        t.add(&ProcessKey::new(1, "x"), &st[1..], 4);
        t.add(&ProcessKey::new(1, "x"), &st, 2);
        t.add(&ProcessKey::new(2, "y"), &st, 3);
        t.period_sum = 900;
        let ctx = RowContext { host: "h".into(), labels: vec![] };
        let mut known = std::collections::HashSet::new();
        let (rows, defs) = stack_rows_of(std::slice::from_ref(&t), 61, &ctx, &mut |_| vec![], &mut known);
        assert_eq!((rows.len(), defs.len()), (3, 2));
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 9);
        assert_eq!(rows.iter().map(|r| r.period).sum::<u64>(), 900);
        assert!(rows.iter().all(|r| r.bucket == 60));
        let full = defs.iter().find(|d| d.offsets == [1, 2]).unwrap();
        assert_eq!(full.frames(), [(a.clone(), 1), (b.clone(), 2)]);
        assert_eq!(full.stack, stack_hash(&[(&a, 1), (&b, 2)]));
        assert_ne!(full.stack, stack_hash(&[(&b, 2), (&a, 1)]));
        let (again, none) = stack_rows_of(&[t], 61, &ctx, &mut |_| vec![], &mut known);
        assert_eq!((again.len(), none.len()), (3, 0));
    }

    #[test]
    fn batch_rows_carry_the_batch_id_and_their_index() {
        // Checks the wire form: every line names the batch and a distinct row index, so duplicates can be recognized.
        let row = Row {
            bucket: 60,
            host: "h".into(),
            label_keys: vec![],
            label_values: vec![],
            pid: 1,
            comm: "c".into(),
            kind: "elf".into(),
            image: "/x".into(),
            build_id: String::new(),
            content_hash: 0,
            event: "e".into(),
            offset: 1,
            count: 2,
        };
        let b = Batch::new(vec![row.clone(), row]);
        assert_eq!(b.id.len(), 32);
        assert_ne!(b.id, Batch::new(vec![]).id);
        let lines: Vec<serde_json::Value> = b.to_json_rows().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["batch_id"], b.id.as_str());
        assert_eq!((lines[0]["row"].as_u64(), lines[1]["row"].as_u64()), (Some(0), Some(1)));
    }
}
