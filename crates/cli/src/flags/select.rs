//! The filter flags: which epochs, processes, images and event a command
//! reads. Each is declared once, as a one-field struct, because commands
//! take different subsets in different orders (`diff` has no `--pid`, `top`
//! no `--since`) and clap flattens whole structs: a command flattens the
//! ones it takes, in the order its `--help` lists them. Each derefs to its
//! value, so `a.pid.contains(&pid)` reads as before.

use super::DbArg;
use clap::Args;
use std::ops::Deref;

/// Which stacks: epochs, processes, images, event.
#[derive(Args, Debug, Clone)]
// For call stacks the image filter keeps whole stacks, not the samples in the image.
#[command(mut_arg("image", |a| a.help("Only stacks with a frame in an image whose path contains this text")))]
pub struct Selection {
    #[command(flatten)]
    pub db: DbArg,
    #[command(flatten)]
    pub epoch: EpochFlag,
    /// Only epochs that overlap the last SECONDS (overrides --epoch).
    #[arg(long, value_name = "SECONDS")]
    pub since: Option<u64>,
    /// With --since: only epochs that started at least SECONDS ago.
    #[arg(long, value_name = "SECONDS")]
    pub until: Option<u64>,
    #[command(flatten)]
    pub pid: PidFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    #[command(flatten)]
    pub image: ImageFlag,
    #[command(flatten)]
    pub event: EventFlag,
    #[command(flatten)]
    pub cgroup: CgroupFlag,
}

/// `--epoch`.
#[derive(Args, Debug, Clone)]
pub struct EpochFlag {
    /// Epoch to read: a number, `current` or `all`.
    #[arg(long, default_value = "current")]
    pub epoch: String,
}

/// `--pid`.
#[derive(Args, Debug, Clone, Default)]
pub struct PidFlag {
    /// Only samples of these process ids (repeatable).
    #[arg(long)]
    pub pid: Vec<u32>,
}

/// `--comm`.
#[derive(Args, Debug, Clone, Default)]
pub struct CommFlag {
    /// Only samples of processes with this name (repeatable).
    #[arg(long)]
    pub comm: Vec<String>,
}

/// `--image`.
#[derive(Args, Debug, Clone, Default)]
pub struct ImageFlag {
    /// Only images whose path contains this text.
    #[arg(long)]
    pub image: Option<String>,
}

/// `--cgroup` and `--label`: processes by control group.
#[derive(Args, Debug, Clone, Default)]
pub struct CgroupFlag {
    /// Only processes in this cgroup or below it (its path as in /proc/PID/cgroup, e.g. /system.slice/nginx.service).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Only processes whose cgroup shows this label: unit=NAME, container=ID or pod=UID (repeatable: all must match).
    #[arg(long, value_name = "KEY=VALUE")]
    pub label: Vec<String>,
}

/// `-e/--event`: one event.
#[derive(Args, Debug, Clone, Default)]
pub struct EventFlag {
    /// Event (default: cpu-clock, else the first recorded).
    #[arg(short = 'e', long = "event")]
    pub event: Option<String>,
}

macro_rules! deref_to_value {
    ($($flag:ident . $field:ident : $ty:ty),* $(,)?) => {$(
        impl Deref for $flag {
            type Target = $ty;
            fn deref(&self) -> &$ty {
                &self.$field
            }
        }
    )*};
}

deref_to_value!(
    EpochFlag.epoch: String,
    PidFlag.pid: Vec<u32>,
    CommFlag.comm: Vec<String>,
    ImageFlag.image: Option<String>,
    EventFlag.event: Option<String>,
);
