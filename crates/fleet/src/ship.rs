//! Shipping: batches go to the spool first and a background thread sends
//! them, oldest first, so the collector never waits for the server. A
//! batch leaves the spool only once ClickHouse has acknowledged it; a
//! timeout after the insert landed sends it again under the same id, which
//! queries count once.

use crate::client::Client;
use crate::error::{ErrorKind, Result};
use crate::rows::Batch;
use crate::schema;
use crate::spool::{Dropped, Spool};
use crate::url::FleetUrl;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest wait between tries while the server is away.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How long the last flush waits for a server that is failing.
const FAILING_WAIT: Duration = Duration::from_secs(2);

pub struct ShipOptions {
    pub spool_dir: PathBuf,
    pub max_spool_bytes: u64,
    /// How long one insert may take before it counts as failed (and is retried).
    pub timeout: Duration,
}

/// What shipping did, for the closing line.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ShipReport {
    pub sent_batches: u64,
    pub sent_samples: u64,
    /// Batches still in the spool (sent by the next run).
    pub pending_batches: usize,
    pub dropped: Dropped,
    pub last_error: Option<String>,
}

#[derive(Default)]
struct State {
    stop: bool,
    /// The spooled batch being sent now: a full spool never drops it.
    in_flight: Option<PathBuf>,
    sent_batches: u64,
    sent_samples: u64,
    last_error: Option<String>,
    /// The last try failed: the server is away or refusing.
    failing: bool,
}

struct Shared {
    spool: Spool,
    state: Mutex<State>,
    wake: Condvar,
}

pub struct Shipper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    url: FleetUrl,
}

impl Shipper {
    /// Checks the server (credentials, that it is ClickHouse, the schema)
    /// and starts sending. A server that is away is no error: batches wait
    /// in the spool, and the returned note says so.
    pub fn start(url: &FleetUrl, opts: &ShipOptions) -> Result<(Shipper, Option<String>)> {
        let client = Client::with_timeout(url, opts.timeout);
        let note = match schema::check(&client) {
            Ok(info) => schema::prune(&client, &info).err().map(|e| format!("retention: {e}")),
            Err(e) if e.kind() == ErrorKind::Unreachable => Some(format!("{e}; batches wait in the spool until it answers")),
            Err(e) => return Err(e),
        };
        let spool = Spool::open(&opts.spool_dir, opts.max_spool_bytes)?;
        let shared = Arc::new(Shared { spool, state: Mutex::new(State::default()), wake: Condvar::new() });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("loupe-ship".into()).spawn(move || send_loop(&s, &client))?;
        Ok((Shipper { shared, thread: Some(thread), url: url.clone() }, note))
    }

    pub fn url(&self) -> &FleetUrl {
        &self.url
    }

    pub fn spool_dir(&self) -> &Path {
        self.shared.spool.dir()
    }

    /// Queues a batch (on disk) and wakes the sender.
    pub fn push(&self, batch: &Batch) -> Result<()> {
        let st = self.shared.state.lock().expect("ship state");
        self.shared.spool.push_keeping(batch, st.in_flight.as_deref())?;
        self.shared.wake.notify_all();
        Ok(())
    }

    /// Sends what is spooled for up to `wait` (2 s once the server is
    /// failing), then stops the sender; what is left stays in the spool
    /// for the next run.
    pub fn finish(mut self, wait: Duration) -> ShipReport {
        let start = Instant::now();
        while start.elapsed() < wait && !self.shared.spool.is_empty().unwrap_or(true) {
            let st = self.shared.state.lock().expect("ship state");
            if st.failing && start.elapsed() > FAILING_WAIT {
                break;
            }
            let _ = self.shared.wake.wait_timeout(st, Duration::from_millis(50));
        }
        self.shared.state.lock().expect("ship state").stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.report()
    }

    pub fn report(&self) -> ShipReport {
        let st = self.shared.state.lock().expect("ship state");
        ShipReport {
            sent_batches: st.sent_batches,
            sent_samples: st.sent_samples,
            pending_batches: self.shared.spool.len().unwrap_or(0),
            dropped: self.shared.spool.dropped(),
            last_error: st.last_error.clone(),
        }
    }
}

/// Sends spooled batches oldest first; on failure waits (longer each time,
/// up to [`RETRY_MAX`]) and tries the same batch again.
fn send_loop(s: &Shared, client: &Client) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let next = {
            let mut st = s.state.lock().expect("ship state");
            if st.stop {
                return;
            }
            let next = s.spool.oldest().unwrap_or_else(|e| {
                st.last_error = Some(e.to_string());
                None
            });
            st.in_flight = next.as_ref().map(|(p, _)| p.clone());
            if next.is_none() {
                let _ = s.wake.wait_timeout(st, Duration::from_millis(500));
                continue;
            }
            next
        };
        let Some((path, batch)) = next else { continue };
        let result = send(client, &batch);
        let mut st = s.state.lock().expect("ship state");
        st.in_flight = None;
        match result.and_then(|_| s.spool.remove(&path)) {
            Ok(()) => {
                st.sent_batches += 1;
                st.sent_samples += batch.samples();
                st.failing = false;
                backoff = Duration::from_millis(100);
                s.wake.notify_all();
            }
            Err(e) => {
                st.last_error = Some(e.to_string());
                st.failing = true;
                if st.stop {
                    return;
                }
                let _ = s.wake.wait_timeout(st, backoff);
                backoff = (backoff * 2).min(RETRY_MAX);
            }
        }
    }
}

/// One batch into `samples` (and its stacks into `stacks` and `stack_counts`); on a Distributed table the insert returns
/// once every shard has its rows, so an acknowledged batch is stored.
/// Names go first: a query that sees a batch's samples finds their names.
pub fn send(client: &Client, batch: &Batch) -> Result<()> {
    let sync = [("insert_distributed_sync", "1")];
    if !batch.symbols.is_empty() {
        client.insert_json("symbols", &batch.symbols_json(), &sync)?;
    }
    // Stacks before the counts that name them, for the same reason.
    if !batch.stacks.is_empty() {
        client.insert_json("stacks", &batch.stacks_json(), &sync)?;
    }
    if !batch.stack_rows.is_empty() {
        client.insert_json("stack_counts", &batch.stack_rows_json(), &sync)?;
    }
    if batch.rows.is_empty() {
        return Ok(());
    }
    client.insert_json("samples", &batch.to_json_rows(), &sync)
}
