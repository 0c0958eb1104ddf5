//! Loupe's fleet store: every host ships what each flush merges to
//! ClickHouse, and queries aggregate the whole fleet there.
//!
//! The design constraint: nothing lost and nothing counted twice. Batches
//! are written to a bounded on-disk [`spool`] before a background thread
//! sends them ([`ship`]); each row carries its batch's id and index, and
//! [`query`] takes one copy per `(batch_id, row)` before summing, so a
//! batch delivered twice counts once. Whole hours are read from hourly
//! [`rollup`]s that materialized views keep on insert, corrected for
//! batches stored twice, so a day over a thousand hosts reads thousands of
//! rows per host, not a row per minute and stack. The SQL runs on
//! ClickHouse 18.16 (Debian bookworm) as well as current releases.
//!
//! ```no_run
//! use loupe_fleet::{client::Client, schema, url::FleetUrl};
//! let url = FleetUrl::parse("clickhouse://127.0.0.1:8123/loupe").unwrap();
//! let c = Client::new(&url);
//! schema::init(&c, &schema::InitOptions::default()).unwrap();
//! ```

pub mod client;
pub mod error;
pub mod labels;
pub mod query;
pub mod rollup;
pub mod rows;
pub mod schema;
pub mod ship;
pub mod spool;
pub mod symbols;
pub mod url;

pub use error::{Error, ErrorKind, Result};
