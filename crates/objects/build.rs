//! Compiles the allocation probes and generates their Rust skeleton. They
//! read user registers and two task_struct fields through CO-RE, so the C
//! library's UAPI headers suffice (no kernel header dump is needed).

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch_includes = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    SkeletonBuilder::new()
        .source("src/bpf/allocs.bpf.c")
        .clang_args([arch_includes, "-D__TARGET_ARCH_x86".into(), "-Wall".into(), "-Werror".into(), "-O2".into(), "-g".into()])
        .build_and_generate(out.join("allocs.skel.rs"))
        .expect("building the allocation probes");
    println!("cargo:rerun-if-changed=src/bpf/allocs.bpf.c");
}
