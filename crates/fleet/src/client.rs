//! A blocking client for ClickHouse's HTTP interface: one POST per
//! statement, the statement in the `query` parameter, data in the body.
//! Errors are sorted into those worth retrying (the server is away or slow)
//! and those that are not (wrong password, not ClickHouse at all).

use crate::error::{Error, ErrorKind, Result};
use crate::url::FleetUrl;
use std::time::Duration;

/// How long one statement may take before the server counts as away.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client {
    url: FleetUrl,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(url: &FleetUrl) -> Client {
        Client::with_timeout(url, DEFAULT_TIMEOUT)
    }

    pub fn with_timeout(url: &FleetUrl, timeout: Duration) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(5))))
            .build();
        Client { url: url.clone(), agent: config.into() }
    }

    pub fn url(&self) -> &FleetUrl {
        &self.url
    }

    /// Runs one statement that returns nothing (DDL, INSERT with data in the query).
    pub fn execute(&self, sql: &str) -> Result<()> {
        self.post(sql, "", &[]).map(drop)
    }

    /// Runs a SELECT and returns its rows as TabSeparated fields, unescaped.
    pub fn select(&self, sql: &str) -> Result<Vec<Vec<String>>> {
        let body = self.post(&format!("{sql} FORMAT TabSeparated"), "", &[])?;
        Ok(body.lines().map(|l| l.split('\t').map(unescape).collect()).collect())
    }

    /// Runs a SELECT and returns its rows as JSON objects (for arrays, which
    /// TabSeparated writes in ClickHouse's own quoting). 64-bit integers
    /// come as strings or numbers, by server setting: read them with [`json_u64`].
    pub fn select_json(&self, sql: &str) -> Result<Vec<serde_json::Value>> {
        let body = self.post(&format!("{sql} FORMAT JSONEachRow"), "", &[])?;
        body.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .map_err(|e| Error::new(ErrorKind::Protocol, format!("{}: unreadable JSON row ({e}): {l:.80}", self.url.display())))
            })
            .collect()
    }

    /// `INSERT INTO table FORMAT JSONEachRow` with `rows` (one JSON object a line) as the body.
    pub fn insert_json(&self, table: &str, rows: &str, settings: &[(&str, &str)]) -> Result<()> {
        self.post(&format!("INSERT INTO {table} FORMAT JSONEachRow"), rows, settings).map(drop)
    }

    fn post(&self, sql: &str, body: &str, settings: &[(&str, &str)]) -> Result<String> {
        let u = &self.url;
        let mut req = self.agent.post(u.http_base()).query("database", &u.database);
        if let Some(user) = &u.user {
            req = req.query("user", user);
        }
        if let Some(pw) = &u.password {
            req = req.query("password", pw);
        }
        for (k, v) in settings {
            req = req.query(*k, *v);
        }
        // The statement leads the body, so long statements need no URL room.
        let full = if body.is_empty() { sql.to_string() } else { format!("{sql}\n{body}") };
        let mut resp = req.send(full.as_bytes()).map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let is_clickhouse = resp.headers().keys().any(|k| k.as_str().starts_with("x-clickhouse-"));
        let text = resp.body_mut().with_config().limit(u64::MAX).read_to_string().map_err(|e| self.transport(e))?;
        if status == 200 && is_clickhouse {
            return Ok(text);
        }
        Err(self.refusal(status, is_clickhouse, &text))
    }

    /// What a non-200 answer (or one without ClickHouse's headers) means.
    fn refusal(&self, status: u16, is_clickhouse: bool, text: &str) -> Error {
        let at = self.url.display();
        let code = server_code(text);
        if !is_clickhouse && code.is_none() {
            let head: String = text.chars().take(80).collect();
            return Error::new(
                ErrorKind::NotClickHouse,
                format!("{at}: the server answered HTTP {status} but is not ClickHouse's HTTP interface (answer begins {head:?})"),
            );
        }
        let first = text.lines().next().unwrap_or("").trim();
        match code {
            // 192 unknown user, 193 wrong password, 516 authentication failed (newer servers).
            Some(192 | 193 | 516) => Error::new(ErrorKind::Auth, format!("{at}: ClickHouse refused the credentials: {first}")),
            Some(81) => {
                Error::new(ErrorKind::Schema, format!("{at}: the database does not exist; run `loupe fleet init {at}` first: {first}"))
            }
            _ => Error::new(ErrorKind::Server, format!("{at}: ClickHouse answered HTTP {status}: {first}")),
        }
    }

    fn transport(&self, e: ureq::Error) -> Error {
        let at = self.url.display();
        match e {
            ureq::Error::Protocol(p) => Error::new(
                ErrorKind::NotClickHouse,
                format!("{at}: the server there does not speak HTTP ({p}); is this ClickHouse's HTTP port (8123 by default)?"),
            ),
            ureq::Error::Timeout(t) => Error::new(
                ErrorKind::Unreachable,
                format!("{at}: no answer in time ({t}); the server is slow or this is not ClickHouse's HTTP port"),
            ),
            other => Error::new(ErrorKind::Unreachable, format!("{at}: cannot reach ClickHouse: {other}")),
        }
    }
}

/// The `Code: N` ClickHouse puts at the start of its error messages.
fn server_code(text: &str) -> Option<u32> {
    let rest = text.trim_start().strip_prefix("Code: ")?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// A JSON number, or a number in a string (ClickHouse quotes 64-bit integers by default).
pub fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// TabSeparated's escapes undone.
pub fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_string();
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// A string as a single-quoted SQL literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_and_escapes_parse() {
        // Checks the code at the head of old and new ClickHouse error texts, TSV unescaping and SQL quoting.
        assert_eq!(server_code("Code: 193, e.displayText() = DB::Exception: Wrong password"), Some(193));
        assert_eq!(server_code("Code: 516. DB::Exception: default: Authentication failed"), Some(516));
        assert_eq!(server_code("<html>"), None);
        assert_eq!(unescape(r"a\tb\\c\nd"), "a\tb\\c\nd");
        assert_eq!(quote(r"it's a\b"), r"'it\'s a\\b'");
    }
}
