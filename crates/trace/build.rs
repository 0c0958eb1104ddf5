//! Compiles the block I/O tracepoint program (src/kernel/bpf/block.bpf.c) and
//! generates its Rust skeleton. It declares the few tracepoint fields it
//! reads itself and CO-RE relocates them at load time against the running
//! kernel's BTF, so no kernel header dump is needed to build it.

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch_includes = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    SkeletonBuilder::new()
        .source("src/kernel/bpf/block.bpf.c")
        .clang_args([arch_includes, "-Wall".into(), "-Werror".into(), "-O2".into(), "-g".into()])
        .build_and_generate(out.join("block.skel.rs"))
        .expect("building the block I/O tracepoint program");
    println!("cargo:rerun-if-changed=src/kernel/bpf/block.bpf.c");
}
