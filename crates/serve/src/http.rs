//! Just enough HTTP/1.x for GET (and one POST): read a request head under a
//! size limit, split its target into a decoded path and query, read a body
//! of a declared length under its own limit, write a response with a length
//! and `Connection: close`.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// Percent-decoded.
    pub path: String,
    /// Decoded `name=value` pairs in order (`+` is a space).
    pub query: Vec<(String, String)>,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    /// What followed the head: the bytes that came with it, all of it
    /// once [`read_body`] has run.
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A request that cannot be read: answered with its status and closed.
#[derive(Debug, PartialEq, Eq)]
pub enum HttpError {
    TooLarge(usize),
    /// A body longer than the limit (declared length, limit).
    BodyTooLarge(u64, usize),
    /// A POST without `Content-Length`.
    NoLength,
    Malformed(&'static str),
    /// The client went away or was too slow: nothing to answer.
    Io,
}

impl HttpError {
    pub fn response(&self) -> Response {
        match self {
            HttpError::TooLarge(max) => Response::error(431, &format!("request line and headers exceed {max} bytes")),
            HttpError::BodyTooLarge(n, max) => {
                Response::error(413, &format!("the body is {n} bytes, more than the {max} this server takes"))
            }
            HttpError::NoLength => Response::error(411, "a body needs a Content-Length header"),
            HttpError::Malformed(why) => Response::error(400, &format!("malformed request: {why}")),
            HttpError::Io => Response::error(408, "request not received in time"),
        }
    }
}

/// Reads up to the blank line that ends the head; never more than `max` bytes.
pub fn read_request(r: &mut dyn Read, max: usize) -> Result<Request, HttpError> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let rest = loop {
        if let Some((end, len)) = find_end(&head) {
            let rest = head.split_off(end + len);
            head.truncate(end);
            break rest;
        }
        if head.len() > max {
            return Err(HttpError::TooLarge(max));
        }
        let n = r.read(&mut buf).map_err(|_| HttpError::Io)?;
        if n == 0 {
            return Err(if head.is_empty() { HttpError::Io } else { HttpError::Malformed("the head ends early") });
        }
        head.extend_from_slice(&buf[..n]);
    };
    if head.len() > max {
        return Err(HttpError::TooLarge(max));
    }
    let mut req = parse_head(std::str::from_utf8(&head).map_err(|_| HttpError::Malformed("not UTF-8"))?)?;
    req.body = rest;
    Ok(req)
}

/// Reads the rest of the body `Content-Length` declares, refusing one past `max` before reading it.
pub fn read_body(r: &mut dyn Read, req: &mut Request, max: usize) -> Result<(), HttpError> {
    let len: u64 =
        req.header("content-length").ok_or(HttpError::NoLength)?.parse().map_err(|_| HttpError::Malformed("bad Content-Length"))?;
    if len > max as u64 {
        return Err(HttpError::BodyTooLarge(len, max));
    }
    let len = len as usize;
    if req.body.len() > len {
        return Err(HttpError::Malformed("more bytes than Content-Length"));
    }
    let have = req.body.len();
    req.body.resize(len, 0);
    r.read_exact(&mut req.body[have..]).map_err(|_| HttpError::Io)
}

/// Where the head ends and the length of the blank line that ends it.
fn find_end(b: &[u8]) -> Option<(usize, usize)> {
    let crlf = b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    crlf.or_else(|| b.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)))
}

fn parse_head(head: &str) -> Result<Request, HttpError> {
    let mut lines = head.lines();
    let line = lines.next().ok_or(HttpError::Malformed("no request line"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(HttpError::Malformed("the request line is not METHOD TARGET VERSION"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed("not HTTP/1.x"));
    }
    let mut headers = Vec::new();
    for l in lines {
        let (n, v) = l.split_once(':').ok_or(HttpError::Malformed("a header line without a colon"))?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = decode(path, false).ok_or(HttpError::Malformed("bad percent-encoding in the path"))?;
    Ok(Request { method: method.to_string(), path, query: parse_query(query)?, headers, body: Vec::new() })
}

fn parse_query(q: &str) -> Result<Vec<(String, String)>, HttpError> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, v) = p.split_once('=').unwrap_or((p, ""));
            match (decode(n, true), decode(v, true)) {
                (Some(n), Some(v)) => Ok((n, v)),
                _ => Err(HttpError::Malformed("bad percent-encoding in the query")),
            }
        })
        .collect()
}

/// Percent-decoding; `plus` turns `+` into a space (query strings).
pub fn decode(s: &str, plus: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    /// Shared with the kept answer it came from, if any (see [`crate::Reply`]).
    pub body: Arc<Vec<u8>>,
    /// Where to keep the body gzipped once it is sent (see `route::after_sent`).
    pub gzip_later: Option<Arc<OnceLock<Arc<Vec<u8>>>>>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Arc<Vec<u8>>>) -> Response {
        Response { status, content_type, headers: Vec::new(), body: body.into(), gzip_later: None }
    }

    /// `{"error": message}`.
    pub fn error(status: u16, message: &str) -> Response {
        let body = serde_json::to_vec(&serde_json::json!({ "error": message })).expect("a string map serializes");
        Response::new(status, "application/json", body)
    }

    pub fn write_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nX-Content-Type-Options: nosniff\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (n, v) in &self.headers {
            head += &format!("{n}: {v}\r\n");
        }
        head += "\r\n";
        w.write_all(head.as_bytes())?;
        w.write_all(&self.body)?;
        w.flush()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request_head_with_a_decoded_query() {
        // Checks method, decoded path, query pairs in order (repeats kept, + and %xx decoded) and lowercased headers.
        let raw = b"GET /api/top?by=procedure&comm=a+b&comm=%63&children= HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n";
        let r = read_request(&mut &raw[..], 8192).unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/api/top"));
        let q: Vec<(&str, &str)> = r.query.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(q, [("by", "procedure"), ("comm", "a b"), ("comm", "c"), ("children", "")]);
        assert_eq!(r.header("authorization"), Some("Bearer t"));
    }

    #[test]
    fn refuses_heads_past_the_limit_and_malformed_ones() {
        // Checks the size limit (431) whether or not the head ever ends, and 400 for a broken request line or escape.
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
        assert_eq!(read_request(&mut long.as_bytes(), 64), Err(HttpError::TooLarge(64)));
        let endless = "X".repeat(10_000);
        assert_eq!(read_request(&mut endless.as_bytes(), 64), Err(HttpError::TooLarge(64)));
        assert!(matches!(read_request(&mut &b"GET /\r\n\r\n"[..], 64), Err(HttpError::Malformed(_))));
        assert!(matches!(read_request(&mut &b"GET /%zz HTTP/1.1\r\n\r\n"[..], 64), Err(HttpError::Malformed(_))));
        assert_eq!(HttpError::TooLarge(64).response().status, 431);
    }

    #[test]
    fn reads_a_declared_body_and_refuses_one_past_the_limit_unread() {
        // Checks that the body's first bytes (read with the head) and the rest join, and that 413/411 come from the headers alone.
        let mut raw: &[u8] = b"POST /api/ingest/pprof HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789";
        let mut r = read_request(&mut raw, 8192).unwrap();
        read_body(&mut raw, &mut r, 10).unwrap();
        assert_eq!(r.body, b"0123456789");
        let mut big: &[u8] = b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n";
        let mut r = read_request(&mut big, 8192).unwrap();
        assert_eq!(read_body(&mut big, &mut r, 10), Err(HttpError::BodyTooLarge(11, 10)));
        assert_eq!(HttpError::BodyTooLarge(11, 10).response().status, 413);
        let mut none: &[u8] = b"POST / HTTP/1.1\r\n\r\n";
        let mut r = read_request(&mut none, 8192).unwrap();
        assert_eq!(read_body(&mut none, &mut r, 10), Err(HttpError::NoLength));
    }
}
