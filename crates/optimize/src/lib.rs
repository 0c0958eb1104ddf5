//! Morph's Manager (Zhang et al., SOSP'97 §3.3) on Loupe's database: PC
//! samples of one executable image, combined across runs and epochs with
//! aging, become per-function basic-block counts (scaled by block length,
//! blocks from `loupe-calc`'s control-flow graphs), written as BOLT's
//! no-LBR fdata or LLVM's text sample profile; then llvm-bolt runs, the
//! candidate is checked and measured against the original, and installed
//! or discarded.
//!
//! Pure modules (`combine`, `blocks`, `fdata`, `llvm_sample`, `stats`,
//! `lineage`, `lbr_fold`, `probing`, `profile`) take values; `manager`
//! decides what the manager does and reaches the world only through the
//! traits of its `Env` (the profile database, the files, the user's
//! commands, the clock, llvm-bolt), so its decisions are unit-tested with
//! fakes; `tool` and `manage` hold the real process and file work.
//! Errors are [`Error`]s with an [`ErrorKind`]; their message is the text
//! the decision log keeps.

pub mod bat;
pub mod blocks;
pub mod bolt_names;
pub mod combine;
pub mod config;
pub mod drift;
pub mod error;
pub mod fdata;
pub mod identity;
pub mod infer;
pub mod lbr;
pub mod lbr_fold;
pub mod lineage;
pub mod llvm_sample;
pub mod manage;
pub mod manager;
pub mod mcf;
pub mod policy;
pub mod probing;
pub mod profile;
pub mod stats;
pub mod tool;

pub use error::{Error, ErrorKind, Result};
