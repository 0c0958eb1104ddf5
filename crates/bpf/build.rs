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

    for name in ["aggregate", "stacks", "offcpu"] {
        let src = format!("src/bpf/{name}.bpf.c");
        let obj = out.join(format!("{name}.bpf.o"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(&obj)
            .clang_args([format!("-I{}", out.display()), "-Isrc/bpf".into(), "-Wall".into(), "-Werror".into(), "-O2".into(), "-g".into()])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .expect("building the BPF object");
        let bytes = std::fs::read(&obj).expect("read the BPF object");
        for (section, size) in program_sections(&bytes) {
            // BPF instructions are 8 bytes; the verifier's own count is printed by the live tests.
            println!("cargo:warning={name}.bpf.o: program {section}: {} BPF instructions", size / 8);
        }
        println!("cargo:rerun-if-changed={src}");
    }
    println!("cargo:rerun-if-changed=src/codes.in");
    println!("cargo:rerun-if-changed=src/bpf/stackwalk.h");
    println!("cargo:rerun-if-changed=src/bpf/eventindex.h");
    println!("cargo:rerun-if-changed=src/bpf/pystack.h");
}

/// (name, size) of the ELF64 sections holding BPF programs (SEC("perf_event"), SEC("tp_btf/...")).
fn program_sections(elf: &[u8]) -> Vec<(String, u64)> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    let name = |i: usize| {
        let start = strtab + u32_at(header(i));
        let end = start + elf[start..].iter().position(|&b| b == 0).unwrap_or(0);
        String::from_utf8_lossy(&elf[start..end]).into_owned()
    };
    (0..shnum).map(|i| (name(i), u64_at(header(i) + 0x20))).filter(|(n, _)| n == "perf_event" || n.starts_with("tp_btf/")).collect()
}
