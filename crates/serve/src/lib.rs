//! The HTTP side of `loupe serve`: a small read-only server that answers
//! `/api/<command>` by running the command through an [`Api`] the binary
//! implements (so the API cannot drift from the CLI), `/api/openapi.json`,
//! and the front end's built files, embedded at build time.
//!
//! Design constraints: it binds 127.0.0.1 unless given a token; only GET,
//! but for `POST /api/ingest/<format>` when [`Config::allow_ingest`] (a
//! body past [`Config::max_body_bytes`] gets 413, before it is read);
//! a request line plus headers past [`Config::max_request_bytes`] is refused;
//! at most [`Config::workers`] commands run at once (more wait up to
//! [`Config::queue_wait`] for one to end, at most [`Config::queue_len`] of
//! them; then 503: a page asks for several answers at once); a
//! command that runs past [`Config::time_limit`] answers 503; a panicking
//! command answers 500 with a message, never its panic text. Paths never
//! come from a request: the [`Api`] owns the databases.
//!
//! It is plain `std::net`, one short-lived thread per connection and no
//! keep-alive: GET without bodies needs none of an HTTP library's
//! machinery, and owning the reader is what makes the size and time limits
//! exact.
//!
//! ```no_run
//! use loupe_serve::{Api, ApiError, Config, Reply, Server};
//! use std::sync::Arc;
//! struct Echo;
//! impl Api for Echo {
//!     fn call(&self, command: &str, _params: &[(String, String)]) -> Result<Reply, ApiError> {
//!         Ok(Reply::json(format!("{{\"command\": {command:?}}}").into_bytes()))
//!     }
//!     fn openapi(&self) -> Vec<u8> {
//!         b"{}".to_vec()
//!     }
//! }
//! let server = Server::bind(Config::new("127.0.0.1:0".parse().unwrap()), Arc::new(Echo)).unwrap();
//! println!("http://{}/", server.local_addr());
//! server.serve();
//! ```

mod assets;
mod error;
mod http;
mod route;

pub use error::{ApiError, ApiErrorKind, Error, ErrorKind};

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the server asks of the binary: run a command into JSON bytes (or,
/// for exports, a file to download).
pub trait Api: Send + Sync + 'static {
    /// Runs `command` (`top`, `data/profile`, ...) with the request's query
    /// parameters, in order (the token already taken out).
    fn call(&self, command: &str, params: &[(String, String)]) -> Result<Reply, ApiError>;
    /// The OpenAPI document served at `/api/openapi.json`.
    fn openapi(&self) -> Vec<u8>;
    /// Stores a profile POSTed to `/api/ingest/<format>` (asked only when
    /// [`Config::allow_ingest`]); `params` as for [`Api::call`].
    fn ingest(&self, format: &str, params: &[(String, String)], body: &[u8]) -> Result<Reply, ApiError> {
        let _ = (params, body);
        Err(ApiError::new(ApiErrorKind::NotFound, format!("this server stores no {format} profiles")))
    }
}

/// A command's answer: its bytes and what they are.
///
/// The bytes are shared (`Arc`): a kept answer is handed to every request
/// that asks for it, and a whole machine's flame tree is 26-34 MB, whose
/// copy (and the page faults of fresh memory for it) was a third of a new
/// flame question's CPU time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub body: Arc<Vec<u8>>,
    pub content_type: &'static str,
    /// Sent as an attachment under this name (`Content-Disposition`).
    pub filename: Option<String>,
    /// The body gzipped, shared by the clones of a kept answer: made after
    /// the first answer to a client that accepts gzip was sent (plain, so
    /// that a new question does not wait for it), sent to later ones (a
    /// whole machine's flame tree is 34 MB of JSON, a tenth gzipped).
    gzip: Arc<OnceLock<Arc<Vec<u8>>>>,
}

impl Reply {
    /// The command's JSON.
    pub fn json(body: Vec<u8>) -> Reply {
        Reply { body: Arc::new(body), content_type: "application/json", filename: None, gzip: Arc::default() }
    }

    /// A file to save (an export), named `filename`.
    pub fn download(body: Vec<u8>, content_type: &'static str, filename: &str) -> Reply {
        Reply { body: Arc::new(body), content_type, filename: Some(filename.to_string()), gzip: Arc::default() }
    }
}

/// `body` gzipped at the fastest level.
fn gzip(body: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 8), flate2::Compression::fast());
    z.write_all(body).and_then(|()| z.finish()).expect("writing to memory cannot fail")
}

/// Where and how to serve.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// Required of every request when set (`Authorization: Bearer T` or
    /// `?token=T`); required to listen on anything but loopback.
    pub token: Option<String>,
    /// Commands running at once; requests beyond wait in line.
    pub workers: usize,
    /// How long a request waits in line for a worker before it gets 503.
    pub queue_wait: Duration,
    /// Requests that may wait in line at once; the next gets 503 at once.
    pub queue_len: usize,
    /// Request line and headers together.
    pub max_request_bytes: usize,
    /// How long one command may run before the request gets 503.
    pub time_limit: Duration,
    /// How long a client may take to send its request or read the answer.
    pub io_timeout: Duration,
    /// Whether `POST /api/ingest/<format>` is answered (off: 403).
    pub allow_ingest: bool,
    /// The largest body an ingest request may send.
    pub max_body_bytes: usize,
}

impl Config {
    pub fn new(listen: SocketAddr) -> Config {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Config {
            listen,
            token: None,
            workers: cpus.clamp(2, 8),
            queue_wait: Duration::from_secs(20),
            queue_len: 64,
            max_request_bytes: 8 * 1024,
            time_limit: Duration::from_secs(60),
            io_timeout: Duration::from_secs(10),
            allow_ingest: false,
            max_body_bytes: 64 << 20,
        }
    }
}

/// A bound server; [`Server::serve`] answers requests until the process ends.
pub struct Server {
    listener: TcpListener,
    shared: Arc<route::Shared>,
}

impl Server {
    /// Binds `config.listen`; refuses a non-loopback address without a token.
    pub fn bind(config: Config, api: Arc<dyn Api>) -> Result<Server, Error> {
        if !config.listen.ip().is_loopback() && config.token.as_deref().is_none_or(str::is_empty) {
            return Err(Error::new(
                ErrorKind::NeedsToken,
                format!("{} is not a loopback address: anyone who can reach it could read the profiles; give --token", config.listen),
            ));
        }
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| Error::new(ErrorKind::Bind, format!("cannot listen on {}: {e}", config.listen)))?;
        Ok(Server { listener, shared: Arc::new(route::Shared { config, api, slots: Slots::default() }) })
    }

    /// The bound address (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Accepts connections forever, each on its own short-lived thread.
    pub fn serve(self) {
        for stream in self.listener.incoming() {
            let Ok(stream) = stream else { continue };
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new().name("loupe-serve".into()).spawn(move || connection(stream, &shared));
            if let Err(e) = spawned {
                eprintln!("loupe serve: cannot start a thread for a connection: {e}");
            }
        }
    }
}

fn connection(mut stream: TcpStream, shared: &Arc<route::Shared>) {
    let t = shared.config.io_timeout;
    let _ = stream.set_read_timeout(Some(t));
    let _ = stream.set_write_timeout(Some(t));
    let response = match http::read_request(&mut stream, shared.config.max_request_bytes) {
        Ok(mut req) => match route::read_body(shared, &mut req, &mut stream) {
            Ok(()) => route::handle(shared, &req),
            Err(e) => e.response(),
        },
        Err(e) => e.response(),
    };
    let _ = response.write_to(&mut stream);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    route::after_sent(&response);
}

/// Running and waiting commands, and the signal that a worker is free.
#[derive(Default)]
pub(crate) struct Slots {
    counts: Mutex<SlotCounts>,
    freed: Condvar,
}

#[derive(Default)]
struct SlotCounts {
    running: usize,
    waiting: usize,
}

/// One slot of [`Config::workers`], given back when dropped.
struct Slot(Arc<route::Shared>);

impl Slot {
    /// A free worker, waiting in line for one up to [`Config::queue_wait`];
    /// None when the line is full or the wait ran out.
    fn take(shared: &Arc<route::Shared>) -> Option<Slot> {
        let (config, slots) = (&shared.config, &shared.slots);
        let mut counts = slots.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.running >= config.workers {
            if counts.waiting >= config.queue_len {
                return None;
            }
            counts.waiting += 1;
            let deadline = Instant::now() + config.queue_wait;
            while counts.running >= config.workers {
                let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else { break };
                counts = slots.freed.wait_timeout(counts, left).unwrap_or_else(|e| e.into_inner()).0;
            }
            counts.waiting -= 1;
            if counts.running >= config.workers {
                return None;
            }
        }
        counts.running += 1;
        Some(Slot(Arc::clone(shared)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let slots = &self.0.slots;
        slots.counts.lock().unwrap_or_else(|e| e.into_inner()).running -= 1;
        slots.freed.notify_one();
    }
}
