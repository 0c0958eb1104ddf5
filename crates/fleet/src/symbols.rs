//! Symbols once per build: a background thread uploads each build's
//! procedure table (start offset, size, name) the first time any host of
//! the fleet meets it, so a query host names frames of binaries it never
//! saw. It runs beside the sender, never on the collection thread, and
//! holds one build's table at a time, sent in chunks: memory stays bounded
//! by the largest symbol table, not by every binary the host runs.
//!
//! A build counts as uploaded once its row is in `symbol_builds`, written
//! after all its chunks; a host that dies mid-upload leaves it to be sent
//! again, and queries read one copy per (build, start).

use crate::client::{quote, Client};
use crate::error::Result;
use crate::rows::image_key;
use crate::url::FleetUrl;
use loupe_model::ImageId;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Procedures per INSERT: a chunk of a few MB at most.
const CHUNK: usize = 20_000;
/// Builds waiting to be looked at; more are offered again at the next flush.
const QUEUE: usize = 1024;

/// Reads an image's procedures as (offset, size, name), sorted by offset,
/// or says why it cannot.
pub type Namer = Box<dyn FnMut(&ImageId) -> std::result::Result<Vec<(u64, u64, String)>, String> + Send>;

/// What uploading did, for the closing line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UploadReport {
    /// Builds this host uploaded.
    pub builds: u64,
    pub procedures: u64,
    /// Builds another host (or an earlier run) had uploaded already.
    pub already_there: u64,
    /// Builds that could not be read (no file, not ELF, no symbols).
    pub unreadable: u64,
}

pub struct Uploader {
    tx: Option<SyncSender<ImageId>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<UploadReport>>,
    /// Builds offered so far (by key): each is offered once per run.
    offered: HashSet<String>,
}

impl Uploader {
    /// Starts the uploading thread; `namer` runs on it.
    pub fn start(url: &FleetUrl, timeout: Duration, namer: Namer) -> Result<Uploader> {
        let (tx, rx) = sync_channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let client = Client::with_timeout(url, timeout);
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("loupe-symbols".into()).spawn(move || upload_loop(&client, &rx, namer, &s))?;
        Ok(Uploader { tx: Some(tx), stop, thread: Some(thread), offered: HashSet::new() })
    }

    /// Queues a build not offered before; never blocks (a full queue
    /// leaves it to be offered again).
    pub fn offer(&mut self, image: &ImageId) {
        let Some(key) = image_key(image) else { return };
        if self.offered.contains(&key) {
            return;
        }
        let Some(tx) = &self.tx else { return };
        match tx.try_send(image.clone()) {
            Ok(()) => {
                self.offered.insert(key);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
        }
    }

    /// Lets the thread finish what is queued for up to `wait`, then stops it
    /// between chunks (an unfinished build is uploaded by the next run).
    pub fn finish(mut self, wait: Duration) -> UploadReport {
        drop(self.tx.take());
        let Some(t) = self.thread.take() else { return UploadReport::default() };
        let start = std::time::Instant::now();
        while !t.is_finished() && start.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::Relaxed);
        t.join().unwrap_or_default()
    }
}

/// Takes builds as they come; one the server cannot take now (away) is
/// tried again a little later.
fn upload_loop(client: &Client, rx: &Receiver<ImageId>, mut namer: Namer, stop: &AtomicBool) -> UploadReport {
    // Background work: the collection thread comes first when CPUs are busy.
    // SAFETY: plain syscalls on this thread's own id.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
    let mut report = UploadReport::default();
    let mut retry: VecDeque<ImageId> = VecDeque::new();
    let mut open = true;
    while !stop.load(Ordering::Relaxed) && (open || !retry.is_empty()) {
        let next = match rx.recv_timeout(Duration::from_millis(if retry.is_empty() { 500 } else { 1000 })) {
            Ok(image) => Some(image),
            Err(RecvTimeoutError::Timeout) => retry.pop_front(),
            Err(RecvTimeoutError::Disconnected) => {
                open = false;
                retry.pop_front()
            }
        };
        let Some(image) = next else { continue };
        if upload(client, &image, &mut namer, stop, &mut report).is_err() && !stop.load(Ordering::Relaxed) {
            retry.push_back(image);
            if !open {
                // Shutting down with the server away: the next run offers these again.
                return report;
            }
        }
    }
    report
}

/// Uploads one build unless the fleet has it. Err: the server did not take it (try again later).
fn upload(client: &Client, image: &ImageId, namer: &mut Namer, stop: &AtomicBool, report: &mut UploadReport) -> Result<()> {
    let Some(key) = image_key(image) else { return Ok(()) };
    let there = client.select(&format!("SELECT count() FROM symbol_builds WHERE image_key = {}", quote(&key)))?;
    if there.first().and_then(|r| r.first()).is_some_and(|n| n != "0") {
        report.already_there += 1;
        return Ok(());
    }
    let procs = match namer(image) {
        Ok(p) if !p.is_empty() => p,
        _ => {
            report.unreadable += 1;
            return Ok(());
        }
    };
    let sync = [("insert_distributed_sync", "1")];
    for chunk in procs.chunks(CHUNK) {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let body: String = chunk
            .iter()
            .map(|(start, size, name)| {
                serde_json::json!({ "image_key": key, "start": start, "size": size, "name": name }).to_string() + "\n"
            })
            .collect();
        client.insert_json("procedures", &body, &sync)?;
    }
    let row = serde_json::json!({ "image_key": key, "image": image.path, "procedures": procs.len() });
    client.insert_json("symbol_builds", &(row.to_string() + "\n"), &sync)?;
    report.builds += 1;
    report.procedures += procs.len() as u64;
    Ok(())
}

/// Names of `offsets` of the build `image_key` from its uploaded procedure
/// table: the sized procedure covering each, else the nearest unsized one
/// before it (as the local symbolizer decides).
pub fn names(client: &Client, image_key: &str, offsets: &[u64]) -> Result<HashMap<u64, String>> {
    let Some(&max) = offsets.iter().max() else { return Ok(HashMap::new()) };
    let rows = client.select(&format!(
        "SELECT start, any(size), any(name) FROM procedures WHERE image_key = {} AND start <= {max} GROUP BY start ORDER BY start",
        quote(image_key)
    ))?;
    let table: Vec<(u64, u64, String)> =
        rows.into_iter().filter_map(|r| Some((r.first()?.parse().ok()?, r.get(1)?.parse().ok()?, r.get(2)?.clone()))).collect();
    Ok(offsets.iter().filter_map(|&off| covering(&table, off).map(|n| (off, n.to_string()))).collect())
}

/// The procedure of a sorted (start, size, name) table that holds `off`.
fn covering(table: &[(u64, u64, String)], off: u64) -> Option<&str> {
    let i = table.partition_point(|(s, _, _)| *s <= off);
    let before = &table[..i];
    before
        .iter()
        .rev()
        .take(8)
        .find(|(s, size, _)| off < s + size)
        .or_else(|| before.last().filter(|(_, size, _)| *size == 0))
        .map(|(_, _, n)| n.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_is_named_by_the_procedure_covering_it() {
        // Checks sized procedures, the gap after one, and an unsized procedure reaching to the next.
        let t = vec![(0x10, 0x10, "a".to_string()), (0x40, 0, "b".to_string()), (0x80, 0x8, "c".to_string())];
        assert_eq!(covering(&t, 0x10), Some("a"));
        assert_eq!(covering(&t, 0x1f), Some("a"));
        assert_eq!(covering(&t, 0x20), None);
        assert_eq!(covering(&t, 0x50), Some("b"));
        assert_eq!(covering(&t, 0x87), Some("c"));
        assert_eq!(covering(&t, 0x88), None);
        assert_eq!(covering(&t, 0x5), None);
    }
}
