//! Embeds the front end's built assets (`web/dist`): builds them first with
//! npm when they are missing or older than their sources, then writes a
//! table of `include_bytes!` into OUT_DIR. Without `web/package.json` (no
//! front end yet) the table is empty and the server says so at `/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let web = manifest.join("../../web");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("assets.rs");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LOUPE_WEB_DIST");
    // Watched even while missing (cargo then reruns this script on every
    // build), so that the front end is picked up as soon as it lands.
    println!("cargo:rerun-if-changed={}", web.join("package.json").display());
    // A prebuilt directory to embed as it is (no npm run).
    let dist = match std::env::var_os("LOUPE_WEB_DIST") {
        Some(d) => Some(PathBuf::from(d)),
        None if web.join("package.json").is_file() => {
            for p in sources(&web) {
                println!("cargo:rerun-if-changed={}", p.display());
            }
            println!("cargo:rerun-if-changed={}", web.join("dist").display());
            build_if_stale(&web);
            Some(web.join("dist"))
        }
        None => None,
    };
    let mut files = Vec::new();
    if let Some(d) = &dist {
        collect(d, d, &mut files);
    }
    files.sort();
    let mut code = String::from("/// Built front-end files: path under dist/, bytes.\npub static ASSETS: &[(&str, &[u8])] = &[\n");
    for (rel, abs) in &files {
        code += &format!("    ({rel:?}, include_bytes!({:?})),\n", abs.display().to_string());
    }
    code += "];\n";
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}

/// What a front-end build reads: its sources, manifests and configs.
fn sources(web: &Path) -> Vec<PathBuf> {
    let mut v = vec![web.join("src"), web.join("package.json"), web.join("package-lock.json"), web.join("index.html")];
    if let Ok(rd) = std::fs::read_dir(web) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.contains(".config.") || name.starts_with("tsconfig") {
                v.push(e.path());
            }
        }
    }
    v.into_iter().filter(|p| p.exists()).collect()
}

fn build_if_stale(web: &Path) {
    let built = mtime(&web.join("dist/index.html"));
    let newest = sources(web).iter().map(|p| newest_under(p)).max().flatten();
    if built.is_some() && (newest.is_none() || built >= newest) {
        return;
    }
    // npm writes node_modules/.package-lock.json on install: older than the
    // lock file means a dependency was added since (tests read node_modules too).
    let installed = mtime(&web.join("node_modules/.package-lock.json"));
    if installed.is_none() || installed < mtime(&web.join("package-lock.json")) {
        npm(web, &["ci"]);
    }
    npm(web, &["run", "build"]);
}

fn npm(web: &Path, args: &[&str]) {
    let status = Command::new("npm").args(args).current_dir(web).status().unwrap_or_else(|e| {
        panic!("cannot run npm ({e}) to build the web front end in {}: run scripts/setup.sh, which installs Node.js and npm", web.display())
    });
    if !status.success() {
        panic!("`npm {}` failed in {} ({status}); the server embeds web/dist", args.join(" "), web.display());
    }
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn newest_under(p: &Path) -> Option<SystemTime> {
    let own = mtime(p);
    let Ok(rd) = std::fs::read_dir(p) else { return own };
    rd.flatten().map(|e| newest_under(&e.path())).fold(own, |a, b| a.max(b))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            let abs = std::fs::canonicalize(&p).unwrap_or(p.clone());
            out.push((rel.to_string_lossy().replace('\\', "/"), abs));
        }
    }
}
