//! `clickhouse://[user:password@]host:port/database`: where the fleet store is.

use crate::error::{Error, ErrorKind, Result};

/// A parsed fleet URL. The port is ClickHouse's HTTP port (8123 by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetUrl {
    pub user: Option<String>,
    pub password: Option<String>,
    pub host: String,
    pub port: u16,
    pub database: String,
}

impl FleetUrl {
    pub fn parse(s: &str) -> Result<FleetUrl> {
        let bad = |why: &str| {
            Error::new(ErrorKind::BadUrl, format!("bad fleet URL {s:?}: {why} (expected clickhouse://[user:password@]host:port/database)"))
        };
        let rest = s.strip_prefix("clickhouse://").ok_or_else(|| bad("it must start with clickhouse://"))?;
        let (authority, database) = rest.split_once('/').ok_or_else(|| bad("no /database after the host"))?;
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (Some(n.to_string()), Some(p.to_string())),
                None => (Some(u.to_string()), None),
            },
            None => (None, None),
        };
        if user.as_deref() == Some("") {
            return Err(bad("empty user name before @"));
        }
        let (host, port) = hostport.rsplit_once(':').ok_or_else(|| bad("no :port after the host"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port: u16 = port.parse().map_err(|_| bad(&format!("port {port:?} is not a number from 1 to 65535")))?;
        if port == 0 {
            return Err(bad("port 0"));
        }
        if database.is_empty() || !database.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad("the database name must be letters, digits and _"));
        }
        Ok(FleetUrl { user, password, host: host.to_string(), port, database: database.to_string() })
    }

    /// The HTTP endpoint, without credentials (they travel in headers).
    pub fn http_base(&self) -> String {
        format!("http://{}:{}/", self.host, self.port)
    }

    /// The URL again with the password hidden, for messages.
    pub fn display(&self) -> String {
        let user = match (&self.user, &self.password) {
            (Some(u), Some(_)) => format!("{u}:***@"),
            (Some(u), None) => format!("{u}@"),
            _ => String::new(),
        };
        format!("clickhouse://{user}{}:{}/{}", self.host, self.port, self.database)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_part_and_hides_the_password() {
        // Checks user, password, host, port and database, and that display() never prints the password.
        let u = FleetUrl::parse("clickhouse://bob:s3cr@t@127.0.0.1:8123/prof").unwrap();
        assert_eq!((u.user.as_deref(), u.password.as_deref()), (Some("bob"), Some("s3cr@t")));
        assert_eq!((u.host.as_str(), u.port, u.database.as_str()), ("127.0.0.1", 8123, "prof"));
        assert_eq!(u.display(), "clickhouse://bob:***@127.0.0.1:8123/prof");
        let plain = FleetUrl::parse("clickhouse://db.example:9000/loupe").unwrap();
        assert_eq!((plain.user, plain.password), (None, None));
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        // Checks one clear reason per kind of malformed URL.
        for (url, why) in [
            ("http://h:1/db", "must start with clickhouse://"),
            ("clickhouse://h:1", "no /database"),
            ("clickhouse://h/db", "no :port"),
            ("clickhouse://h:99999/db", "not a number"),
            ("clickhouse://h:1/", "database name"),
            ("clickhouse://:1/db", "no host"),
        ] {
            let e = FleetUrl::parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadUrl);
            assert!(e.to_string().contains(why), "{url}: {e}");
        }
    }
}
