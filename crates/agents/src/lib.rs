//! Loupe's agents (PEM §5's continuous profiling and optimization agents,
//! Morph's loop made general): each looks at what Loupe measures of a
//! process, proposes one action on it, applies it with a recorded way back,
//! measures the effect on the metric the configuration names with a
//! significance test over alternating windows, and keeps the action or
//! takes it back — logging every decision with its evidence.
//!
//! The design constraint: an agent never leaves a process changed without a
//! reason on disk. The way back is logged before the action; a daemon
//! killed mid-trial leaves the process running as it was or with the action
//! in force (both correct: no action here changes what a program computes,
//! only how fast), and the next daemon undoes what it finds pending
//! ([`runner::Runner::recover`]). A failed undo is logged as
//! `revert-failed` and printed to stderr. Only processes on the
//! allow-list are touched, never Loupe itself ([`target::AllowList`]).
//!
//! Agents here: [`hugepages`] (collapse the hot anonymous ranges of a
//! process whose sampled data accesses spread over many pages) and
//! [`placement`] (threads whose shared cache lines bounce between CPUs
//! placed on CPUs that share a cache, or apart). Morph's manager runs
//! under the same runner and log through [`Agent::own_round`] (wired by the
//! binary, which owns its tools).
//!
//! ```
//! use loupe_agents::trial::{judge, Outcome, Windows};
//! // Six windows with the action off and on: every one 10% faster with it.
//! let w = Windows { off: vec![100.0, 98.0, 103.0, 99.0, 101.0, 100.0], on: vec![110.0, 108.0, 113.0, 109.0, 111.0, 110.0] };
//! let v = judge(&w, true, 0.05, 0.02);
//! assert_eq!(v.outcome, Outcome::Better);
//! assert!(v.p_better < 0.05);
//! ```

pub mod error;
pub mod hugepages;
pub mod log;
pub mod metric;
pub mod observe;
pub mod placement;
pub mod runner;
pub mod sys;
pub mod target;
pub mod trial;

pub use error::{Error, ErrorKind, Result};

use serde_json::Value;
use std::sync::atomic::AtomicBool;
use target::Target;

/// One kind of action on processes.
pub trait Agent {
    fn name(&self) -> &'static str;
    /// Why this agent cannot act on this machine, or `None`.
    fn unavailable(&self) -> Option<String> {
        None
    }
    /// Measure before and after instead of alternating, because the way back
    /// does not restore the state before (a split huge page leaves its base
    /// pages physically contiguous, which TLBs that coalesce contiguous
    /// entries still reward): after the first switch, "off" would no
    /// longer be the baseline.
    fn before_after(&self) -> bool {
        false
    }
    /// Looks at one allowed process and says what to do with it.
    fn observe(&mut self, t: &Target, stop: &AtomicBool) -> Result<Observation>;
    /// Undoes an action from the way back its `applied` entry recorded (a
    /// killed daemon left it pending); says what was done.
    fn undo(&mut self, t: &Target, way_back: &Value) -> Result<Value>;
    /// An agent that chooses its own targets and validates its own actions
    /// (Morph's manager, with its alternating runs of builds) does its
    /// round here, logging through `log`; `None` for the others.
    fn own_round(&mut self, _log: &log::Log, _stop: &AtomicBool) -> Option<Result<()>> {
        None
    }
}

/// What an agent makes of a process.
pub enum Observation {
    /// Nothing to do, and why (with the figures).
    LeaveAlone {
        why: String,
        evidence: Value,
    },
    Propose(Proposal),
}

pub struct Proposal {
    /// One sentence: what will be done.
    pub what: String,
    pub evidence: Value,
    pub action: Box<dyn Action>,
}

/// A change to one process that can be taken back.
pub trait Action {
    /// What a later daemon needs to undo the action ([`Agent::undo`]):
    /// logged before the action is first applied.
    fn way_back(&self) -> Value;
    /// Applies the action; says what happened (bytes collapsed, CPUs set).
    fn apply(&mut self) -> Result<Value>;
    /// Takes it back; says what happened.
    fn revert(&mut self) -> Result<Value>;
}

/// The agents this crate builds, with one line each (`loupe agents list`).
pub const KNOWN: &[(&str, &str)] = &[
    (
        "hugepages",
        "collapses the hot anonymous ranges of a process whose sampled data accesses spread over many pages (or that faults \
         pages in fast) into 2 MiB pages with process_madvise(MADV_COLLAPSE); way back: MADV_COLD on each huge page less \
         one base page, which splits it",
    ),
    (
        "placement",
        "places threads whose sampled shared cache lines bounce between CPUs on CPUs that share a cache (true sharing) or \
         apart (false sharing) with sched_setaffinity; way back: each thread's CPUs before",
    ),
    (
        "morph",
        "Morph's re-optimization manager (`loupe optimize manage`, the daemon's --optimize CONFIG) run by the agents' \
         runner, its decisions copied into the agents' log; it validates and rolls back its own builds",
    ),
];

/// Builds the named agent of this crate (`morph` is built by the binary).
pub fn build(name: &str, db: &std::path::Path) -> Result<Box<dyn Agent>> {
    let scratch = log::dir(db).join("observe");
    match name {
        "hugepages" => Ok(Box::new(hugepages::HugePages::new(scratch))),
        "placement" => Ok(Box::new(placement::Placement::new(scratch))),
        other => Err(Error::new(
            ErrorKind::Config,
            format!("unknown agent `{other}` (the agents are {})", KNOWN.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")),
        )),
    }
}
