//! Loupe's vertical event tracing, after PEM (Wisniewski et al.): one XML
//! event specification ([`spec`]) from which logging stubs and decoders are
//! generated for C, Rust, Python, Go and Java ([`codegen`]); one record format
//! ([`record`]) that every stub writes byte for byte the same; a lock-free
//! per-CPU shared-memory buffer ([`buffer`]) that the stubs log into and the
//! daemon drains; trace files ([`tracefile`]) and exports ([`export`]).
//!
//! ```
//! let spec = loupe_trace::spec::parse(&[("app.xml", "<events name='app'>
//!   <event name='App::Loop::Iter' description='one iteration'>
//!     <layerId value='App'/><classId value='Loop'/><specifier value='Iter'/>
//!     <fields><field name='n' type='uint32' description='index'/></fields>
//!   </event></events>")]).unwrap();
//! let ev = spec.by_name("App::Loop::Iter").unwrap();
//! let bytes = loupe_trace::record::encode(ev, 42, &[loupe_trace::record::Value::U(7)]);
//! assert_eq!(bytes.len(), 16);
//! ```

pub mod buffer;
pub mod client;
pub mod codegen;
pub mod counters;
pub mod ctf;
pub mod dump;
pub mod export;
pub mod kernel;
pub mod perfetto;
pub mod raster;
pub mod record;
pub mod render;
pub mod report;
pub mod spec;
pub mod stub;
pub mod tracefile;
pub mod tsc;
pub mod vectors;
