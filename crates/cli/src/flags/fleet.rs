//! The fleet flags: `--ship` on `record`/`daemon`, `--source` and its
//! filters on `top`, and `loupe fleet init`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

pub const FLEET_HELP: &str = "Examples:\n  \
loupe fleet init clickhouse://127.0.0.1:8123/loupe --retention 30d\n  \
loupe fleet init clickhouse://ch1:8123/loupe clickhouse://ch2:8123/loupe --cluster prof\n  \
loupe daemon --ship clickhouse://ch1:8123/loupe --label version=1.2\n  \
loupe top --source clickhouse://ch1:8123/loupe --where unit=nginx.service --since 1h --by host";

/// Shipping every flush to the fleet store, beside the local database.
#[derive(Args, Debug, Clone, Default)]
pub struct ShipArgs {
    /// Also send what each flush merges to this ClickHouse database
    /// (`clickhouse://[user:password@]host:port/database`, the HTTP port; see `loupe fleet init`).
    #[arg(long, value_name = "URL")]
    pub ship: Option<String>,
    /// A label on every shipped row, `key=value`; repeatable. `host=NAME` replaces the host name.
    #[arg(long = "label", value_name = "KEY=VALUE", requires = "ship")]
    pub labels: Vec<String>,
    /// Also upload the procedure table (start, size, name) of every build shipped rows name, once per build-id
    /// in the whole fleet, so query hosts name frames of binaries they do not have. A thread of its own reads
    /// one build's symbol table at a time (not its DWARF: no source lines or inline frames) and sends it in chunks.
    #[arg(long, requires = "ship")]
    pub ship_symbols: bool,
    /// Where batches wait while ClickHouse is away (default: DB/fleet-spool).
    #[arg(long, value_name = "DIR", requires = "ship")]
    pub spool: Option<PathBuf>,
    /// Most the spool holds (bytes, or with K, M, G); when full the oldest batch is dropped and counted.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size, requires = "ship")]
    pub spool_max: u64,
}

/// `loupe ingest pprof FILE`: profiles from other agents into the fleet store.
#[derive(Args, Debug)]
pub struct IngestArgs {
    #[command(subcommand)]
    pub format: IngestFormat,
}

#[derive(Subcommand, Debug)]
pub enum IngestFormat {
    /// A pprof profile.proto, gzipped or not (Go's net/http/pprof, async-profiler, the OpenTelemetry
    /// profiler, `loupe export --format pprof`): its stacks and leaf samples, and the names it gives.
    Pprof(IngestPprofArgs),
}

#[derive(Args, Debug)]
pub struct IngestPprofArgs {
    /// The profile file(s).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The fleet store (`clickhouse://[user:password@]host:port/database`).
    #[arg(long, value_name = "URL")]
    pub ship: String,
    /// A label on every row, `key=value`; repeatable. `host=NAME` sets the host (default: this host's name).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// The sample value to store (a sample type such as `samples`, `alloc_space`); default: the first counted one.
    #[arg(long)]
    pub event: Option<String>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let scale: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("{s:?}: expected bytes, or a number with K, M or G")),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(scale)).ok_or_else(|| format!("{s:?}: expected bytes, or a number with K, M or G"))
}

/// Reading the fleet store instead of a local database.
#[derive(Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Query this ClickHouse database (the whole fleet) instead of --db.
    #[arg(long, value_name = "URL")]
    pub source: Option<String>,
    /// Only rows where KEY=VALUE, or KEY~REGEX; keys: host, comm, pid, image, event, build_id, or any label. Repeatable (all must hold).
    #[arg(long = "where", value_name = "KEY=VALUE|KEY~REGEX", requires = "source")]
    pub wheres: Vec<String>,
}

#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Create (or migrate) the fleet schema on each server given; refuses a newer schema.
    Init(FleetInitArgs),
}

#[derive(Args, Debug)]
pub struct FleetInitArgs {
    /// Each server's database, `clickhouse://[user:password@]host:port/database`; every shard of --cluster.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
    /// The `remote_servers` cluster to distribute `samples` over (a Distributed table over `samples_local` on each shard).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Keep rows this long (`30d`, `2w`; `0` keeps everything).
    #[arg(long, value_name = "DAYS", default_value = "0")]
    pub retention: String,
}
