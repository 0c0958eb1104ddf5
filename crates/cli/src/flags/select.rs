//! The filter flags: which epochs, processes, images and event a command
//! reads. Each is declared once, as a small struct, because commands take
//! different subsets in different orders (`diff` has no `--pid`, `stats` no
//! `--epoch`) and clap flattens whole structs: a command flattens the ones
//! it takes, in the order its `--help` lists them. Each derefs to its main
//! value, so `a.pid.contains(&pid)` reads as before. `--since/--until` ride
//! with `--epoch`, so every command that selects epochs takes a time range.

use super::DbArg;
use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone};
use clap::Args;
use loupe_store::query::Epochs;
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
    #[command(flatten)]
    pub pid: PidFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    #[command(flatten)]
    pub image: ImageFlag,
    #[command(flatten)]
    pub event: EventFlag,
}

/// `--epoch`, or a time range: `--since`/`--until`.
#[derive(Args, Debug, Clone)]
pub struct EpochFlag {
    /// Epoch to read: a number, `current` or `all`.
    #[arg(long, default_value = "current")]
    pub epoch: String,
    /// Only epochs that overlap the time from TIME to now (or --until), overriding --epoch: a duration ago
    /// (`90`, `90s`, `10m`, `2h`, `1d`) or a time (`2026-11-27T05:40:00`, local unless it ends in `Z` or an offset).
    #[arg(long, value_name = "TIME", value_parser = TimeSpec::parse)]
    pub since: Option<TimeSpec>,
    /// Only epochs that started before TIME (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = TimeSpec::parse)]
    pub until: Option<TimeSpec>,
}

impl EpochFlag {
    /// The epochs these flags select, with durations counted back from `now` (unix seconds).
    pub fn which_at(&self, now: u64) -> Result<Epochs, loupe_store::Error> {
        if self.since.is_none() && self.until.is_none() {
            return Epochs::parse(&self.epoch);
        }
        let from_unix = self.since.map_or(0, |t| t.unix(now));
        let to_unix = self.until.map_or(now, |t| t.unix(now));
        Ok(Epochs::Between { from_unix, to_unix })
    }

    /// The epochs these flags select now.
    pub fn which(&self) -> Result<Epochs, loupe_store::Error> {
        self.which_at(Local::now().timestamp().max(0) as u64)
    }
}

/// A point in time as `--since`/`--until` take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    /// Seconds before now.
    Ago(u64),
    /// Unix seconds.
    At(u64),
}

impl TimeSpec {
    pub fn parse(s: &str) -> Result<TimeSpec, String> {
        Self::parse_duration(s).or_else(|| Self::parse_time(s)).ok_or_else(|| {
            format!("expected a duration (90, 90s, 10m, 2h, 1d) or a time (2026-11-27T05:40:00, with Z or +01:00 for a zone other than the local one), got {s:?}")
        })
    }

    fn parse_duration(s: &str) -> Option<TimeSpec> {
        let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let scale = match unit {
            "" | "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return None,
        };
        let n: f64 = num.parse().ok().filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
        Some(TimeSpec::Ago((n * scale).round() as u64))
    }

    fn parse_time(s: &str) -> Option<TimeSpec> {
        let unix = |t: i64| Some(TimeSpec::At(u64::try_from(t).ok()?));
        if let Ok(t) = DateTime::parse_from_rfc3339(s) {
            return unix(t.timestamp());
        }
        let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"]
            .iter()
            .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
            .or_else(|| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?.and_hms_opt(0, 0, 0))?;
        // The earlier of the two readings when a clock change makes the local time ambiguous.
        unix(Local.from_local_datetime(&naive).earliest()?.timestamp())
    }

    /// Unix seconds, with durations counted back from `now`.
    pub fn unix(self, now: u64) -> u64 {
        match self {
            TimeSpec::Ago(s) => now.saturating_sub(s),
            TimeSpec::At(t) => t,
        }
    }
}

/// A unix time as ISO 8601 in the local zone, with its offset (`2026-11-27T06:40:23+01:00`).
pub fn iso_local(unix: u64) -> String {
    match Local.timestamp_opt(unix as i64, 0).single() {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%:z").to_string(),
        None => unix.to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times_parse_as_documented() {
        // Checks each duration unit, a plain number as seconds, UTC and offset times, and a refusal that names the forms.
        assert_eq!(TimeSpec::parse("90"), Ok(TimeSpec::Ago(90)));
        assert_eq!(TimeSpec::parse("10m"), Ok(TimeSpec::Ago(600)));
        assert_eq!(TimeSpec::parse("2h"), Ok(TimeSpec::Ago(7200)));
        assert_eq!(TimeSpec::parse("1.5d"), Ok(TimeSpec::Ago(129_600)));
        assert_eq!(TimeSpec::parse("2026-11-27T05:40:00Z"), Ok(TimeSpec::At(1_795_758_000)));
        assert_eq!(TimeSpec::parse("2026-11-27T06:40:00+01:00"), Ok(TimeSpec::At(1_795_758_000)));
        let local = TimeSpec::parse("2026-11-27 05:40").unwrap();
        let TimeSpec::At(t) = local else { panic!("{local:?}") };
        let offset = Local.timestamp_opt(t as i64, 0).unwrap().offset().local_minus_utc() as i64;
        assert_eq!(t as i64 + offset, 1_795_758_000, "a time without a zone is local");
        assert!(TimeSpec::parse("yesterday").unwrap_err().contains("10m"));
    }

    #[test]
    fn since_and_until_make_a_time_range() {
        // Checks that durations count back from now, --until alone starts at 0, and no range leaves --epoch in charge.
        let f = |since, until| EpochFlag { epoch: "all".into(), since, until };
        assert_eq!(f(Some(TimeSpec::Ago(60)), None).which_at(1000).unwrap(), Epochs::Between { from_unix: 940, to_unix: 1000 });
        assert_eq!(f(None, Some(TimeSpec::At(500))).which_at(1000).unwrap(), Epochs::Between { from_unix: 0, to_unix: 500 });
        assert_eq!(f(None, None).which_at(1000).unwrap(), Epochs::All);
    }

    #[test]
    fn iso_times_round_trip_through_the_parser() {
        // Checks that what `epochs` prints is read back by --since as the same instant.
        let t = 1_795_758_023;
        assert_eq!(TimeSpec::parse(&iso_local(t)), Ok(TimeSpec::At(t)));
    }
}
