//! Which answer a request gets: token check, method, then the API, the
//! OpenAPI document or an embedded file.

use crate::http::{Request, Response};
use crate::{assets, Api, ApiError, ApiErrorKind, Config, Reply, Slot};
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc};

pub(crate) struct Shared {
    pub config: Config,
    pub api: Arc<dyn Api>,
    /// Commands running and waiting now (see [`crate::Slot`]).
    pub slots: crate::Slots,
}

const NO_FRONT_END: &str = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Loupe</title></head><body>\n\
<p>This loupe was built without its web front end (web/dist). The JSON API is at \
<a href=\"api/openapi.json\">/api/openapi.json</a>.</p>\n</body></html>\n";

pub(crate) fn handle(shared: &Arc<Shared>, req: &Request) -> Response {
    if let Some(want) = &shared.config.token {
        if !authorized(req, want) {
            let mut r = Response::error(401, "a token is required: send `Authorization: Bearer TOKEN` or add ?token=TOKEN");
            r.headers.push(("WWW-Authenticate", "Bearer".into()));
            return r;
        }
    }
    let params: Vec<(String, String)> = req.query.iter().filter(|(n, _)| n != "token").cloned().collect();
    if let Some(format) = ingest_format(req) {
        return ingest(shared, format, &params, &req.body);
    }
    if req.method != "GET" {
        let mut r = Response::error(405, &format!("{} is not allowed: the server is read-only (GET only)", req.method));
        r.headers.push(("Allow", "GET".into()));
        return r;
    }
    match req.path.strip_prefix("/api/") {
        Some("openapi.json") => Response::new(200, "application/json", shared.api.openapi()),
        Some(command) => {
            let mut r = call(shared, command, params, accepts_gzip(req));
            r.headers.push(("Vary", "Accept-Encoding".into()));
            r
        }
        None => asset(&req.path),
    }
}

/// The format of a `POST /api/ingest/<format>`.
fn ingest_format(req: &Request) -> Option<&str> {
    req.path.strip_prefix("/api/ingest/").filter(|_| req.method == "POST")
}

/// Reads an ingest request's body when the server takes ingests and the
/// request is authorized (else it is answered without reading it).
pub(crate) fn read_body(shared: &Shared, req: &mut Request, r: &mut dyn std::io::Read) -> Result<(), crate::http::HttpError> {
    let authorized = shared.config.token.as_deref().is_none_or(|want| authorized(req, want));
    if shared.config.allow_ingest && authorized && ingest_format(req).is_some() {
        crate::http::read_body(r, req, shared.config.max_body_bytes)?;
    }
    Ok(())
}

/// `POST /api/ingest/<format>`: off (403) unless the server allows it.
fn ingest(shared: &Arc<Shared>, format: &str, params: &[(String, String)], body: &[u8]) -> Response {
    if !shared.config.allow_ingest {
        return Response::error(403, "ingest is off on this server: start `loupe serve` with --allow-ingest");
    }
    let Some(_slot) = Slot::take(shared) else {
        return busy(shared);
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| shared.api.ingest(format, params, body))) {
        Ok(Ok(reply)) => Response::new(200, reply.content_type, reply.body),
        Ok(Err(e)) => Response::error(e.status(), e.message()),
        Err(_) => Response::error(500, "internal error: the ingest failed unexpectedly"),
    }
}

/// JSON answers at least this long are sent gzipped to clients that accept it.
const GZIP_FROM: usize = 64 * 1024;

/// Whether `Accept-Encoding` lists gzip without `q=0`.
fn accepts_gzip(req: &Request) -> bool {
    req.header("accept-encoding").is_some_and(|v| {
        v.split(',').any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            parts.next().is_some_and(|c| c.eq_ignore_ascii_case("gzip"))
                && parts.all(|p| p.strip_prefix("q=").is_none_or(|q| q.parse::<f64>().is_ok_and(|q| q > 0.0)))
        })
    })
}

/// Either header or query parameter, compared in constant time.
fn authorized(req: &Request, want: &str) -> bool {
    let bearer = req.header("authorization").and_then(|v| v.strip_prefix("Bearer "));
    let query = req.query.iter().find(|(n, _)| n == "token").map(|(_, v)| v.as_str());
    [bearer, query].into_iter().flatten().any(|got| same(got.trim().as_bytes(), want.as_bytes()))
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 503 for a request that found every worker busy past its wait in line.
fn busy(shared: &Shared) -> Response {
    Response::error(503, &format!("all {} workers are busy; try again", shared.config.workers))
}

/// Runs the command on its own thread, holding a worker slot until it ends
/// (even past the time limit, so that slow commands cannot pile up).
fn call(shared: &Arc<Shared>, command: &str, params: Vec<(String, String)>, gzip: bool) -> Response {
    let Some(slot) = Slot::take(shared) else {
        return busy(shared);
    };
    let (tx, rx) = mpsc::channel();
    let (api, command_owned) = (Arc::clone(&shared.api), command.to_string());
    let spawned = std::thread::Builder::new().name("loupe-api".into()).spawn(move || {
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| api.call(&command_owned, &params)));
        // Free before answering, so that a client's next request finds the slot free.
        drop(slot);
        let _ =
            tx.send(r.unwrap_or_else(|_| Err(ApiError::new(ApiErrorKind::Internal, "internal error: the command failed unexpectedly"))));
    });
    if let Err(e) = spawned {
        return Response::error(503, &format!("cannot start a worker: {e}"));
    }
    match rx.recv_timeout(shared.config.time_limit) {
        Ok(Ok(reply)) => answer(reply, gzip),
        Ok(Err(e)) => Response::error(e.status(), e.message()),
        Err(_) => Response::error(503, &format!("{command} took longer than {} s", shared.config.time_limit.as_secs_f64())),
    }
}

/// The reply as a response: a large JSON one gzipped when the client
/// accepts it and the compressed bytes are made, else plain, marked to be
/// compressed once sent.
fn answer(reply: Reply, gzip: bool) -> Response {
    if gzip && reply.filename.is_none() && reply.body.len() >= GZIP_FROM {
        if let Some(z) = reply.gzip.get() {
            let mut r = Response::new(200, reply.content_type, Arc::clone(z));
            r.headers.push(("Content-Encoding", "gzip".into()));
            return r;
        }
        let mut r = Response::new(200, reply.content_type, reply.body);
        r.gzip_later = Some(reply.gzip);
        return r;
    }
    let mut r = Response::new(200, reply.content_type, reply.body);
    if let Some(name) = reply.filename {
        // Names are the server's own (loupe.pb.gz ...); quotes and controls could not come from a request, but stay out.
        let name: String = name.chars().filter(|c| !c.is_control() && *c != '"' && *c != '\\').collect();
        r.headers.push(("Content-Disposition", format!("attachment; filename=\"{name}\"")));
    }
    r
}

/// After a response is sent: gzips a plain answer that its client would
/// have taken gzipped, when the answer is kept (its compressed bytes are
/// shared with a copy the [`Api`] holds) for the next request to send.
pub(crate) fn after_sent(r: &Response) {
    if let Some(cell) = r.gzip_later.as_ref().filter(|c| Arc::strong_count(c) > 1) {
        cell.get_or_init(|| Arc::new(crate::gzip(&r.body)));
    }
}

/// An embedded file; paths without an extension get index.html (the pages
/// route in the browser).
fn asset(path: &str) -> Response {
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "index.html" } else { rel };
    if let Some(b) = assets::get(rel) {
        return Response::new(200, assets::content_type(rel), b.to_vec());
    }
    let is_page = rel == "index.html" || !rel.rsplit('/').next().unwrap_or(rel).contains('.');
    match (is_page, assets::get("index.html")) {
        (true, Some(b)) => Response::new(200, "text/html; charset=utf-8", b.to_vec()),
        (true, None) => Response::new(200, "text/html; charset=utf-8", NO_FRONT_END.as_bytes().to_vec()),
        (false, _) => Response::error(404, &format!("no file {path}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;
    use std::time::Duration;

    struct Fake;
    impl Api for Fake {
        fn call(&self, command: &str, params: &[(String, String)]) -> Result<Reply, ApiError> {
            match command {
                "echo" => Ok(Reply::json(serde_json::to_vec(&params).unwrap())),
                "big" => Ok(Reply::json(serde_json::to_vec(&vec![params; 10_000]).unwrap())),
                // A kept answer: every call returns a copy of the same one, as the binary's answer cache does.
                "kept" => {
                    static KEPT: OnceLock<Reply> = OnceLock::new();
                    Ok(KEPT.get_or_init(|| Reply::json(serde_json::to_vec(&vec![params; 10_000]).unwrap())).clone())
                }
                "missing" => Err(ApiError::new(ApiErrorKind::NotFound, "no epoch 9")),
                "file" => Ok(Reply::download(b"a;b 1\n".to_vec(), "text/plain; charset=utf-8", "loupe.txt")),
                "slow" => {
                    std::thread::sleep(Duration::from_millis(400));
                    Ok(Reply::json(b"{}".to_vec()))
                }
                _ => panic!("secret panic text"),
            }
        }
        fn openapi(&self) -> Vec<u8> {
            b"{\"openapi\": \"3.0.3\"}".to_vec()
        }
        fn ingest(&self, format: &str, params: &[(String, String)], body: &[u8]) -> Result<Reply, ApiError> {
            Ok(Reply::json(format!("[{format:?}, {}, {}]", params.len(), body.len()).into_bytes()))
        }
    }

    /// One worker; `limit_ms` is the time limit.
    fn shared(token: Option<&str>, limit_ms: u64) -> Arc<Shared> {
        let mut config = Config::new("127.0.0.1:0".parse().unwrap());
        config.token = token.map(String::from);
        config.time_limit = Duration::from_millis(limit_ms);
        config.workers = 1;
        Arc::new(Shared { config, api: Arc::new(Fake), slots: Default::default() })
    }

    fn get(path: &str, query: &[(&str, &str)], headers: &[(&str, &str)]) -> Request {
        let pairs = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        Request { method: "GET".into(), path: path.into(), query: pairs(query), headers: pairs(headers), body: Vec::new() }
    }

    #[test]
    fn errors_panics_and_timeouts_answer_json_with_their_status() {
        // Checks 404 from the API's kind, 500 without the panic's text, 503 past the time limit, 405 for POST.
        // A generous limit where panics are answered: with RUST_BACKTRACE set, printing one takes a while.
        let s = shared(None, 30_000);
        let r = handle(&s, &get("/api/missing", &[], &[]));
        assert_eq!((r.status, String::from_utf8(r.body.to_vec()).unwrap()), (404, r#"{"error":"no epoch 9"}"#.to_string()));
        let r = handle(&s, &get("/api/boom", &[], &[]));
        assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
        assert!(!String::from_utf8(r.body.to_vec()).unwrap().contains("secret"));
        assert_eq!(handle(&shared(None, 100), &get("/api/slow", &[], &[])).status, 503);
        let mut post = get("/api/echo", &[], &[]);
        post.method = "POST".into();
        assert_eq!(handle(&s, &post).status, 405);
    }

    #[test]
    fn ingest_is_answered_only_when_allowed_and_authorized() {
        // Checks 403 while ingest is off, 401 without the token, and that an allowed POST reaches the API with its body and parameters.
        let mut post = get("/api/ingest/pprof", &[("label", "host=a")], &[]);
        (post.method, post.body) = ("POST".into(), b"abc".to_vec());
        assert_eq!(handle(&shared(None, 30_000), &post).status, 403);
        let mut config = shared(Some("sesame"), 30_000).config.clone();
        config.allow_ingest = true;
        let s = Arc::new(Shared { config, api: Arc::new(Fake), slots: Default::default() });
        assert_eq!(handle(&s, &post).status, 401);
        post.query.push(("token".into(), "sesame".into()));
        let r = handle(&s, &post);
        assert_eq!((r.status, String::from_utf8(r.body.to_vec()).unwrap()), (200, r#"["pprof", 1, 3]"#.to_string()));
    }

    #[test]
    fn a_download_is_an_attachment_of_its_type() {
        // Checks that an export's reply keeps its content type and gets a Content-Disposition naming the file.
        let r = handle(&shared(None, 30_000), &get("/api/file", &[], &[]));
        assert_eq!((r.status, r.content_type, r.body.as_slice()), (200, "text/plain; charset=utf-8", &b"a;b 1\n"[..]));
        assert!(r.headers.contains(&("Content-Disposition", "attachment; filename=\"loupe.txt\"".to_string())), "{:?}", r.headers);
    }

    #[test]
    fn a_slow_command_keeps_its_worker_until_it_ends() {
        // Checks the bound on running commands: with one worker busy past its time limit and no wait in line, the next call gets 503.
        let mut config = shared(None, 100).config.clone();
        config.queue_wait = Duration::ZERO;
        let s = Arc::new(Shared { config, api: Arc::new(Fake), slots: Default::default() });
        assert_eq!(handle(&s, &get("/api/slow", &[], &[])).status, 503);
        let r = handle(&s, &get("/api/echo", &[], &[]));
        assert_eq!(r.status, 503);
        assert!(String::from_utf8(r.body.to_vec()).unwrap().contains("busy"));
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(handle(&s, &get("/api/echo", &[], &[])).status, 200);
    }

    /// Until the slow command holds the one worker.
    fn wait_running(s: &Shared) {
        while s.slots.counts.lock().unwrap().running == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_request_waits_in_line_for_a_busy_worker() {
        // Checks the line: while the one worker runs a slow command, a second call waits and is answered once it ends; with no room in line it gets 503 at once.
        let s = shared(None, 30_000);
        let slow = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || handle(&s, &get("/api/slow", &[], &[])).status)
        };
        wait_running(&s);
        let t = std::time::Instant::now();
        assert_eq!(handle(&s, &get("/api/echo", &[], &[])).status, 200);
        assert!(t.elapsed() >= Duration::from_millis(200), "answered after {:?}, while the worker was busy", t.elapsed());
        assert_eq!(slow.join().unwrap(), 200);
        let mut config = s.config.clone();
        config.queue_len = 0;
        let s = Arc::new(Shared { config, api: Arc::new(Fake), slots: Default::default() });
        let slow = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || handle(&s, &get("/api/slow", &[], &[])).status)
        };
        wait_running(&s);
        assert_eq!(handle(&s, &get("/api/echo", &[], &[])).status, 503);
        assert_eq!(slow.join().unwrap(), 200);
    }

    #[test]
    fn the_token_is_checked_and_not_passed_on() {
        // Checks 401 without or with a wrong token, and that ?token= is removed from the command's parameters.
        let s = shared(Some("sesame"), 30_000);
        assert_eq!(handle(&s, &get("/api/echo", &[], &[])).status, 401);
        assert_eq!(handle(&s, &get("/api/echo", &[("token", "sesam")], &[])).status, 401);
        assert_eq!(handle(&s, &get("/api/echo", &[], &[("authorization", "Bearer sesame")])).status, 200);
        let r = handle(&s, &get("/api/echo", &[("by", "line"), ("token", "sesame")], &[]));
        assert_eq!((r.status, String::from_utf8(r.body.to_vec()).unwrap()), (200, r#"[["by","line"]]"#.to_string()));
    }

    #[test]
    fn kept_large_json_is_gzipped_after_its_first_answer_for_clients_that_accept_it() {
        // Checks Content-Encoding: a kept big answer goes plain first, then gzipped (decoding to the plain one) once sent; never when gzip is not accepted or q=0, nor for an answer not kept or a small one.
        let s = shared(None, 30_000);
        let ask = |path: &str, enc: &str| {
            let r = handle(&s, &get(path, &[("by", "line")], &[("accept-encoding", enc)]));
            after_sent(&r);
            r
        };
        let gzipped = |r: &Response| r.headers.contains(&("Content-Encoding", "gzip".to_string()));
        let plain = ask("/api/kept", "identity");
        assert!(plain.body.len() >= GZIP_FROM && !gzipped(&plain));
        assert_eq!(ask("/api/kept", "gzip;q=0").body, plain.body);
        let first = ask("/api/kept", "br, gzip;q=0.8");
        assert!(!gzipped(&first) && first.body == plain.body, "the first answer is not kept waiting");
        let z = ask("/api/kept", "br, gzip;q=0.8");
        assert!(gzipped(&z), "{:?}", z.headers);
        assert!(z.body.len() < plain.body.len() / 4);
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&z.body[..]), &mut unzipped).unwrap();
        assert_eq!(unzipped, *plain.body);
        assert_eq!(ask("/api/kept", "identity").body, plain.body);
        for _ in 0..2 {
            assert!(!gzipped(&ask("/api/big", "gzip")), "an answer nobody keeps is not compressed");
        }
        assert_eq!(ask("/api/echo", "gzip").body.as_slice(), br#"[["by","line"]]"#);
    }
}
