//! Builds the BPF object and its Rust skeleton against the running kernel's
//! BTF (CO-RE), and generates the counter table for both languages.

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let codes = std::fs::read_to_string("src/codes.in").expect("codes.in");
    let names: Vec<&str> =
        codes.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(|l| l.split_whitespace().next().unwrap()).collect();
    let mut h = String::from("/* Generated from src/codes.in by build.rs; do not edit. */\n#pragma once\n");
    let mut rs = String::from("// Generated from src/codes.in by build.rs; do not edit.\n");
    for (i, n) in names.iter().enumerate() {
        h += &format!("#define LOUPE_STAT_{n} {i}\n");
        rs += &format!("pub const STAT_{n}: u32 = {i};\n");
    }
    h += &format!("#define LOUPE_STAT_COUNT {}\n", names.len());
    rs += &format!("pub const STAT_COUNT: u32 = {};\n", names.len());
    std::fs::write("src/bpf/codes.h", h).expect("write codes.h");
    std::fs::write(out.join("codes.rs"), rs).expect("write codes.rs");

    let vmlinux = out.join("vmlinux.h");
    let dump = Command::new("bpftool")
        .args(["btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"])
        .output()
        .expect("bpftool not found: install Debian's bpftool (scripts/setup.sh does)");
    assert!(dump.status.success(), "bpftool btf dump failed: {}", String::from_utf8_lossy(&dump.stderr));
    std::fs::write(&vmlinux, dump.stdout).expect("write vmlinux.h");

    SkeletonBuilder::new()
        .source("src/bpf/aggregate.bpf.c")
        .clang_args([format!("-I{}", out.display()), "-Isrc/bpf".into(), "-Wall".into(), "-Werror".into(), "-O2".into(), "-g".into()])
        .build_and_generate(out.join("aggregate.skel.rs"))
        .expect("building the BPF object");
    println!("cargo:rerun-if-changed=src/bpf/aggregate.bpf.c");
    println!("cargo:rerun-if-changed=src/codes.in");
}
