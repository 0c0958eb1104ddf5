//! `loupe serve`.

use clap::Args;
use std::net::SocketAddr;
use std::time::Duration;

pub const SERVE_HELP: &str = "\
The API mirrors the CLI: /api/COMMAND?flag=value answers what `loupe COMMAND --flag value --format json` \
prints (repeat a parameter to repeat its flag; `flag=` sets a switch), e.g. /api/top?by=procedure&epoch=all, \
/api/flame?epoch=2, /api/diff?a=base:1&b=new:2&mode=weighted, /api/data/profile. `db=NAME` picks a served \
database or fleet source (default: the first --db, else the first --source); diff and stats sides are \
NAME:EPOCH, an EPOCH of the first database, or comma-joined sums; a diff or stats side of a source is NAME:SELECTION \
(/api/diff?a=fleet:host=web-1&b=fleet:host=web-2,since=1h). Over a source, top, flame and export take \
where=KEY=VALUE (repeatable), since and until, as `--source` does on the command line. /api/openapi.json describes every command. Read-only; errors are {\"error\": ...} with \
status 400, 404 or 500. With --allow-ingest, POST /api/ingest/pprof?label=KEY=VALUE (repeatable; db=NAME picks the source) \
stores the pprof in the body in a served fleet source, as `loupe ingest pprof` does.

Examples:
  loupe serve --db prof.db                                  http://127.0.0.1:7777/
  loupe serve --db base=old.db --db new=new.db --listen 127.0.0.1:8080
  loupe serve --db prof.db --source fleet=clickhouse://ch1:8123/loupe
  loupe serve --db prof.db --listen 0.0.0.0:7777 --token \"$(openssl rand -hex 16)\"
  loupe serve --source fleet=clickhouse://ch1:8123/loupe --allow-ingest
      curl --data-binary @cpu.pb.gz 'http://127.0.0.1:7777/api/ingest/pprof?label=host=web-1&label=version=1.3'";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A database to serve: DIR, or NAME=DIR (repeatable; the first is the default). A bare DIR is named by
    /// its last path component.
    #[arg(long = "db", value_name = "[NAME=]DIR", required_unless_present = "sources")]
    pub dbs: Vec<String>,
    /// A fleet store to serve: `clickhouse://[user:password@]host:port/database`, or NAME=URL (repeatable;
    /// named by its database by default). Requests pick it with `db=NAME`, diff sides with NAME:SELECTION.
    #[arg(long = "source", value_name = "[NAME=]URL")]
    pub sources: Vec<String>,
    /// Seconds a fleet source's answer is kept before it is asked again (0 keeps none): hosts ship new
    /// batches every flush, so a kept fleet answer is at most this old.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    pub source_ttl: Duration,
    /// Address to listen on; anything but loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:7777")]
    pub listen: SocketAddr,
    /// Require this token of every request (`Authorization: Bearer TOKEN` or `?token=TOKEN`).
    #[arg(long, env = "LOUPE_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Commands running at once (default: the number of CPUs, 2 to 8); up to 64 more wait up to 20 s in line
    /// for one to end, then get 503.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Seconds one request may take before it gets 503.
    #[arg(long, default_value = "60", value_parser = seconds)]
    pub time_limit: Duration,
    /// MiB kept across requests, least recently used dropped first: half for loaded binaries and debug info
    /// (symbol tables, DWARF), a quarter for named stacks (new flame questions), a quarter for answers;
    /// 0 keeps nothing (every request reads its binaries again).
    #[arg(long, value_name = "MIB", default_value = "1024")]
    pub cache_mb: usize,
    /// Take pprof profiles at POST /api/ingest/pprof into a served --source (off by default; beyond loopback
    /// the --token guards it as it guards reading).
    #[arg(long, requires = "sources")]
    pub allow_ingest: bool,
    /// MiB an ingest request's body may hold; larger ones get 413 unread.
    #[arg(long, value_name = "MIB", default_value = "64")]
    pub max_ingest_mb: usize,
}

fn seconds(s: &str) -> Result<Duration, String> {
    let x: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    Duration::try_from_secs_f64(x).map_err(|e| format!("{s:?}: {e}"))
}
