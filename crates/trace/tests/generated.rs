//! The generated stubs and vectors for Loupe's own spec are checked in under
//! sdk/; this test regenerates them and fails if anything drifted. Run with
//! LOUPE_REGEN=1 to rewrite them.

use loupe_trace::codegen::{generate, Lang};
use loupe_trace::spec::load_files;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn expected() -> Vec<(PathBuf, String)> {
    let r = root();
    let spec = load_files(&[&r.join("crates/trace/spec/loupe.xml")]).unwrap();
    let dir = |l: Lang| match l {
        Lang::C => "sdk/c",
        Lang::Rust => "sdk/rust",
        Lang::Python => "sdk/python",
        Lang::Go => "sdk/go",
        Lang::Java => "sdk/java",
    };
    let mut out: Vec<(PathBuf, String)> = Lang::ALL
        .iter()
        .map(|&l| {
            let f = generate(&spec, l);
            (r.join(dir(l)).join(f.name), f.text)
        })
        .collect();
    let (json, txt) = loupe_trace::vectors::files(&spec);
    out.push((r.join("sdk/vectors/loupe.json"), json));
    out.push((r.join("sdk/vectors/loupe.txt"), txt));
    out
}

// Checked-in generated files equal what the generator produces now.
#[test]
fn generated_files_match() {
    let regen = std::env::var_os("LOUPE_REGEN").is_some();
    for (path, text) in expected() {
        if regen {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(have == text, "{} is stale: run LOUPE_REGEN=1 cargo test -p loupe-trace --test generated", path.display());
    }
}
