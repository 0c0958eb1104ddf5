//! `loupe diff` and `loupe stats`.

use super::{By, CommFlag, EventFlag, Format, ImageFlag, OutputFlag};
use clap::{Args, ValueEnum};

pub const DIFF_HELP: &str = "\
Sides: A and B are each a database directory (its current epoch), DB:EPOCH (EPOCH is a number, N-M, \
`current` or `all`), or several of those joined by commas, which are summed (DCPI's advice: sum runs to \
get enough samples). B is the more stressed side (more load, more CPUs, more data).

Examples:
  loupe diff one-cpu.db two-cpu.db --mode weighted --work 1 2 --by line
  loupe diff prof.db:1 prof.db:2                              two epochs of one database
  loupe diff run1.db,run2.db,run3.db big1.db,big2.db --by procedure --format json
  loupe diff n3.db n4.db --mode saturation --load 3 4 --saturation 0.5
  loupe diff n3.db n4.db --mode powerlaw --load 3 4 --comm myprog

Significance: a bucket with a samples in A and b in B is tested exactly: given n = a + b, b is binomial \
with p = r/(1+r) where r is the B/A ratio of an unchanged bucket (--work W_A W_B gives r = W_B/W_A; \
without it r is the sample-weighted median of the buckets' ratios, i.e. most of the profile is assumed \
unchanged; saturation and powerlaw modes test for any change of the measurement). The p-values are \
controlled for the number of buckets with Benjamini–Hochberg at --level (default 0.05): at most 5% of the \
rows marked significant are expected to be false alarms, and when nothing changed the chance of even one \
false alarm in the whole table is at most 5%. Rows not significant are marked `no` and sorted below. \
Sampling noise is the only noise the test knows: run-to-run variation beyond it (caches, frequency) can \
be absorbed with --min-change.

Saturation and powerlaw measurements are each bucket's fraction of all samples of its side; the score is \
the projected load at which that fraction reaches --saturation (infinite when it does not grow).

Lock tables: when A and B are files written by `loupe locks --format json`, the buckets are locks (by \
name) and the measurement is the fraction of the run each was held; measured times carry no sampling \
noise, so every row counts as significant and p_value is null.
  loupe diff load1.json load2.json --mode saturation --load 1 2 --saturation 1.0";

pub const STATS_HELP: &str = "\
Each RUN is one sample set: a database directory (its current epoch), DB:EPOCH (a number, N-M, `current` \
or `all`), or several joined by commas (summed into one set).

Columns as in DCPI's Figure 3: range% = (max - min) / sum; sum; % of all samples; N = sets with samples \
in the bucket; mean, standard deviation (n-1), min and max over all sets (a set without the bucket counts \
as 0). Sorted by range%, so the procedures whose cost varies most across runs come first. Because a \
bucket with one stray sample has a range of 100%, each row also gets a Poisson dispersion test \
(sum of (count - mean)^2 / mean is chi-square with N-1 degrees of freedom when only sampling noise \
differs between runs), Benjamini-Hochberg controlled at --level; rows that do not vary more than \
sampling noise are marked `no` and sorted below.

Examples:
  loupe stats prof.db:1 prof.db:2 prof.db:3 prof.db:4 prof.db:5 prof.db:6 prof.db:7 prof.db:8
  loupe stats run*.db --by procedure --format json";

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffMode {
    /// B/A, descending.
    Ratio,
    /// d = w_A·m_B − w_B·m_A (McKenney's equation 3), descending.
    Weighted,
    /// Load at which the bucket reaches --saturation by linear projection (equation 4), ascending.
    Saturation,
    /// The same by power-law projection (equation 5), ascending.
    Powerlaw,
}

/// Selection flags shared by `diff` and `stats`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Group samples by image, procedure, source line or instruction address.
    #[arg(long, value_enum, default_value_t = By::Procedure)]
    pub by: By,
    #[command(flatten)]
    pub event: EventFlag,
    #[command(flatten)]
    pub comm: CommFlag,
    #[command(flatten)]
    pub image: ImageFlag,
    /// Show at most this many rows.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[command(flatten)]
    pub output: OutputFlag,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The less stressed side: DB, DB:EPOCH, or several joined by commas (summed).
    #[arg(value_name = "A", required_unless_present = "source")]
    pub a: Option<String>,
    /// The more stressed side, same syntax.
    #[arg(value_name = "B", required_unless_present = "source")]
    pub b: Option<String>,
    #[command(flatten)]
    pub source: super::SourceArgs,
    /// With --source, side A: conditions joined by commas, each KEY=VALUE, KEY~REGEX, since=TIME or
    /// until=TIME (e.g. `version=1.2` or `host~^web-,until=2h`).
    #[arg(long = "a", value_name = "SELECTION", requires = "source")]
    pub fleet_a: Option<String>,
    /// With --source, side B, same syntax as --a.
    #[arg(long = "b", value_name = "SELECTION", requires = "source")]
    pub fleet_b: Option<String>,
    /// How buckets are compared and sorted.
    #[arg(long, value_enum, default_value_t = DiffMode::Ratio)]
    pub mode: DiffMode,
    /// Work done in A and in B (weighted mode's w_A w_B); also the expected B/A of an unchanged bucket.
    /// Without it, w_B/w_A is the sample-weighted median of the buckets' B/A ratios.
    #[arg(long, num_args = 2, value_names = ["W_A", "W_B"])]
    pub work: Option<Vec<f64>>,
    /// Offered loads of A and B (saturation and powerlaw modes).
    #[arg(long, num_args = 2, value_names = ["L_A", "L_B"])]
    pub load: Option<Vec<f64>>,
    /// Saturation measurement M_S, as a fraction of all samples of the side.
    #[arg(long, value_name = "M_S", default_value_t = 1.0)]
    pub saturation: f64,
    /// Significance level (false discovery rate, Benjamini–Hochberg); 1 marks every row significant.
    #[arg(long, default_value_t = 0.05)]
    pub level: f64,
    /// Treat relative changes up to this fraction as no change (e.g. 0.05 for ±5%).
    #[arg(long, default_value_t = 0.0)]
    pub min_change: f64,
    #[command(flatten)]
    pub sel: CompareArgs,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Sample sets, one per argument: DB, DB:EPOCH, or several joined by commas (summed into one set). With --source, each is a
    /// selection of the fleet: conditions joined by commas, each KEY=VALUE, KEY~REGEX, since=TIME or until=TIME (e.g. `host=web-1`).
    #[arg(value_name = "RUN", required = true, num_args = 2..)]
    pub runs: Vec<String>,
    #[command(flatten)]
    pub source: super::SourceArgs,
    /// Significance level of the dispersion test (false discovery rate, Benjamini–Hochberg).
    #[arg(long, default_value_t = 0.05)]
    pub level: f64,
    #[command(flatten)]
    pub sel: CompareArgs,
}
