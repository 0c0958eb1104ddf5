//! Compiles the lock probes and generates their Rust skeleton. The probes
//! only read user registers, so the C library's UAPI headers suffice (no
//! kernel BTF dump is needed).

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch_includes = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    SkeletonBuilder::new()
        .source("src/bpf/locks.bpf.c")
        .clang_args([arch_includes, "-D__TARGET_ARCH_x86".into(), "-Wall".into(), "-Werror".into(), "-O2".into(), "-g".into()])
        .build_and_generate(out.join("locks.skel.rs"))
        .expect("building the lock probes");
    println!("cargo:rerun-if-changed=src/bpf/locks.bpf.c");
}
