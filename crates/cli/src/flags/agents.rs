//! `loupe agents list|status|log`, and the daemon's `--agents-*` flags
//! (the `[agents]` table of its configuration file).

use super::{DbArg, Format};
use clap::{Args, Subcommand};

pub const AGENTS_HELP: &str = "Examples:\n  \
loupe daemon --db /var/lib/loupe --agents-enable hugepages --agents-allow comm:mydb --agents-metric 'counter:/run/mydb/{pid}.ops'\n  \
loupe agents status --db /var/lib/loupe\n  \
loupe agents log --db /var/lib/loupe --agent hugepages --format json\n\n\
In the daemon's --config file the same settings form a table:\n  \
[agents]\n  enable = [\"hugepages\", \"placement\"]\n  allow = [\"comm:mydb\", \"cgroup:/system.slice/web.service\"]\n  \
metric = \"counter:/run/mydb/{pid}.ops\"\n\n\
Every decision, with its evidence, is a JSON line in DB/agents/decisions.jsonl (0600).";

#[derive(Args, Debug)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: AgentsCommand,
}

#[derive(Subcommand, Debug)]
pub enum AgentsCommand {
    /// The agents there are, what each does, and whether this machine lets it act.
    List(AgentsListArgs),
    /// What the daemon's agents are doing: configuration, the trial in progress, actions kept, actions pending.
    Status(AgentsShowArgs),
    /// The decision log: every observation, action, measurement and verdict, with its evidence.
    Log(AgentsLogArgs),
}

#[derive(Args, Debug)]
pub struct AgentsListArgs {
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct AgentsShowArgs {
    #[command(flatten)]
    pub db: DbArg,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct AgentsLogArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Only this agent's entries (hugepages, placement, morph, runner).
    #[arg(long)]
    pub agent: Option<String>,
    /// Only entries about this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Only the last N entries.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// The daemon's agent settings; `[agents] KEY = ...` in its --config file.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Agents (loupe agents)")]
pub struct DaemonAgentsArgs {
    /// Run these agents (hugepages, placement, morph; repeatable). morph runs --optimize CONFIG's manager under the agents' log.
    #[arg(long, value_name = "AGENT")]
    pub agents_enable: Vec<String>,
    /// Processes agents may act on: comm:NAME (or NAME), pid:N, cgroup:PATH (repeatable). Nothing else, and never Loupe, is touched.
    #[arg(long, value_name = "WHO")]
    pub agents_allow: Vec<String>,
    /// What trials measure: counter:PATH (the process's own work count in a file; {pid} is replaced), command:CMD (prints a
    /// work count; LOUPE_PID is set), cpu-per-work:PATH (CPU seconds per unit of that count). Without one, agents only observe.
    #[arg(long, value_name = "METRIC")]
    pub agents_metric: Option<String>,
    /// Seconds between the agents' looks at the allowed processes.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub agents_interval: f64,
    /// Trial: pairs of phases, action off then on (and on then off), alternating.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub agents_rounds: usize,
    /// Trial: windows measured per phase.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub agents_windows: usize,
    /// Trial: seconds per window.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    pub agents_window: f64,
    /// Trial: one-sided significance level of the sign test over window pairs.
    #[arg(long, value_name = "P", default_value_t = 0.05)]
    pub agents_level: f64,
    /// Trial: smallest median gain that keeps an action (0.02: 2%).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.02)]
    pub agents_min_gain: f64,
}
