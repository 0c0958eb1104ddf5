//! Helpers shared by the fuzz targets in `fuzz_targets/`.

pub mod frame;
pub mod spec;
