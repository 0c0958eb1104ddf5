//! Compiles the allocation probes and generates their Rust skeleton, and
//! builds the LD_PRELOAD allocation shim. They
//! read user registers and two task_struct fields through CO-RE, so the C
//! library's UAPI headers suffice (no kernel header dump is needed).

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch_includes = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    SkeletonBuilder::new()
        .source("src/bpf/allocs.bpf.c")
        .clang_args([
            arch_includes,
            "-D__TARGET_ARCH_x86".into(),
            "-Wall".into(),
            "-Werror".into(),
            "-O2".into(),
            "-g".into(),
            "-mcpu=v3".into(),
        ])
        .build_and_generate(out.join("allocs.skel.rs"))
        .expect("building the allocation probes");
    println!("cargo:rerun-if-changed=src/bpf/allocs.bpf.c");
    build_shim(&out);
}

/// The LD_PRELOAD shim, a small C library embedded into the binary.
fn build_shim(out: &std::path::Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let so = out.join("libloupe_alloc.so");
    let st = std::process::Command::new(&cc)
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-Wall", "-Werror", "-fPIC", "-shared", "-o"])
        .arg(&so)
        .arg("shim/alloc_shim.c")
        .args(["-ldl", "-lpthread", "-lgcc_s"])
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(st.success(), "building the allocation shim failed");
    println!("cargo:rerun-if-changed=shim/alloc_shim.c");
}
