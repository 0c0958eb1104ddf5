//! Heap objects for data profiling (DProf §4.2 b and §4.3): which block an
//! address belonged to at a time, where that block was allocated, and — for
//! chosen objects — the history of accesses to it from hardware breakpoints.
//!
//! Allocation tracking writes append-only logs into the record database
//! ([`log`] documents the format); [`AllocationIndex`] reads them back. Times
//! are CLOCK_MONOTONIC nanoseconds, the clock perf samples carry when opened
//! with `use_clockid`, so a sample's time finds the block live at that time.
//!
//! ```no_run
//! let idx = loupe_objects::AllocationIndex::load(std::path::Path::new("/tmp/db")).unwrap();
//! if let Some(a) = idx.lookup(1234, 0x5555_0000_1010, 1_000_000) {
//!     println!("{} bytes at {:#x}, allocated at {:?}", a.size, a.base, idx.site_location(a));
//! }
//! ```

pub mod access;
pub mod bp;
pub mod callers;
pub mod flow;
pub mod history;
pub mod index;
pub mod log;
pub mod preload;
pub mod sideband;
pub mod sites;
pub mod track;

pub use index::{Allocation, AllocationIndex, LoadStats, SiteLocation};
pub use log::{AllocFn, Record, Source};
pub use sites::SiteNamer;
pub use track::{AllocTracker, TrackSummary, TrackerOptions};
