//! Symbolization checked against binutils: addresses from `nm`, file
//! offsets from `readelf -lW`'s program headers, lines from `addr2line`.

use loupe_model::{ImageId, ImageOffset};
use loupe_symbolize::{Reason, Symbolizer, SymbolizerOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Builds the fixture variants into `dir`.
fn build(dir: &Path) {
    let f = fixtures();
    let cc = |args: &[&str]| run(Command::new("cc").args(["-O1", "-g"]).args(args).current_dir(dir));
    cc(&["-shared", "-fPIC", "-o", "libfix.so", f.join("lib.c").to_str().unwrap()]);
    let lib = ["-L.", "-lfix", "-Wl,-rpath,$ORIGIN"];
    cc(&[&["-pie", "-fPIE", "-o", "pie", f.join("prog.c").to_str().unwrap()][..], &lib].concat());
    cc(&[&["-no-pie", "-fno-pie", "-o", "nopie", f.join("prog.c").to_str().unwrap()][..], &lib].concat());
    let sh = |s: &str| run(Command::new("sh").args(["-c", s]).current_dir(dir));
    sh("cp pie pie.stripped && strip pie.stripped");
    sh("objcopy --only-keep-debug pie pie.dbg && cp pie pie.linked && strip pie.linked && objcopy --add-gnu-debuglink=pie.dbg pie.linked");
}

/// The file offset of a function: its `nm` address mapped through the
/// LOAD segment that contains it.
fn file_offset_of(bin: &Path, func: &str) -> (u64, u64) {
    let nm = run(Command::new("nm").arg(bin)) + &run(Command::new("nm").arg("-D").arg(bin));
    let addr = nm
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2].split('@').next() == Some(func)).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{func} not in nm output"));
    let ph = run(Command::new("readelf").arg("-lW").arg(bin));
    for l in ph.lines().filter(|l| l.trim_start().starts_with("LOAD")) {
        let f: Vec<u64> =
            l.split_whitespace().skip(1).take(5).map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap()).collect();
        let (off, vaddr, filesz) = (f[0], f[1], f[3]);
        if addr >= vaddr && addr < vaddr + filesz {
            return (addr, addr - vaddr + off);
        }
    }
    panic!("{func} at {addr:#x} is in no LOAD segment");
}

fn addr2line(bin: &Path, addr: u64) -> (String, u32) {
    let out = run(Command::new("addr2line").arg("-e").arg(bin).arg(format!("{addr:#x}")));
    let (file, line) = out.trim().rsplit_once(':').unwrap();
    (file.to_string(), line.split_whitespace().next().unwrap().parse().unwrap_or(0))
}

fn image(path: &Path) -> ImageId {
    ImageId::elf(path.to_str().unwrap(), Symbolizer::read_build_id(path))
}

#[test]
fn pie_nopie_and_library_match_binutils() {
    // Checks names and file:line for PIE, non-PIE and a shared library against nm/readelf/addr2line.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let mut s = Symbolizer::new(SymbolizerOptions::default());
    for (bin, func) in [("pie", "alpha_function"), ("pie", "beta_function"), ("nopie", "alpha_function"), ("libfix.so", "lib_function")] {
        let path = dir.path().join(bin);
        let (addr, off) = file_offset_of(&path, func);
        let probe = off + 4;
        let r = s.symbolize(&image(&path), &[ImageOffset(probe)], true).remove(0).unwrap();
        assert_eq!(r.procedure, func, "{bin}");
        assert_eq!(r.procedure_start, ImageOffset(off), "{bin}");
        let (file, line) = addr2line(&path, addr + 4);
        assert_eq!((r.file.unwrap(), r.line.unwrap()), (file, line), "{bin} {func}");
    }
}

#[test]
fn stripped_images_use_separate_debug_files() {
    // Checks a stripped binary alone (no symbols), with .gnu_debuglink, and under a .build-id debug dir.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let (addr, off) = file_offset_of(&dir.path().join("pie"), "alpha_function");
    let stripped = dir.path().join("pie.stripped");
    let mut s = Symbolizer::new(SymbolizerOptions { debug_dirs: vec![], ..Default::default() });
    let r = s.symbolize(&image(&stripped), &[ImageOffset(off)], false).remove(0);
    assert!(r.is_err() || r.as_ref().unwrap().procedure != "alpha_function", "stripped image cannot name static functions: {r:?}");
    let linked = dir.path().join("pie.linked");
    let r = s.symbolize(&image(&linked), &[ImageOffset(off)], true).remove(0).unwrap();
    assert_eq!(r.procedure, "alpha_function");
    assert_eq!(r.line, Some(addr2line(&dir.path().join("pie"), addr).1));
    let bid = Symbolizer::read_build_id(&stripped).unwrap().to_hex();
    let dbg = dir.path().join("debug/.build-id").join(&bid[..2]);
    std::fs::create_dir_all(&dbg).unwrap();
    std::fs::copy(dir.path().join("pie.dbg"), dbg.join(format!("{}.debug", &bid[2..]))).unwrap();
    let mut s = Symbolizer::new(SymbolizerOptions { debug_dirs: vec![dir.path().join("debug")], ..Default::default() });
    assert_eq!(s.symbolize(&image(&stripped), &[ImageOffset(off)], false).remove(0).unwrap().procedure, "alpha_function");
}

#[test]
fn stripped_code_groups_by_its_fde_and_a_debuginfo_folder_names_it() {
    // Checks that with no debug file an address inside alpha_function groups at its start (nm's address,
    // from the FDE), that a flat folder holding the .gnu_debuglink file (loupe's --debuginfo) names it, and
    // that a debug file of another build under that name is refused.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let (_, off) = file_offset_of(&dir.path().join("pie"), "alpha_function");
    let sh = |s: &str| run(Command::new("sh").args(["-c", s]).current_dir(dir.path()));
    sh("mkdir bin dbg other && cp pie.linked bin/ && cp pie.dbg dbg/");
    // The same code at the same addresses, another build-id: only the build-id tells the debug files apart.
    let prog = fixtures().join("prog.c");
    sh(&format!(
        "cc -O1 -g -pie -fPIE -o pie.other {} -L. -lfix -Wl,--build-id=0x0123456789abcdef0123456789abcdef01234567 \
         && objcopy --only-keep-debug pie.other other/pie.dbg",
        prog.display()
    ));
    assert_eq!(file_offset_of(&dir.path().join("pie.other"), "alpha_function").1, off);
    let linked = image(&dir.path().join("bin/pie.linked"));
    let inside = [ImageOffset(off + 1)];
    let with = |dirs: &[&str]| {
        let debug_dirs = dirs.iter().map(|d| dir.path().join(d)).collect();
        Symbolizer::new(SymbolizerOptions { debug_dirs, ..Default::default() })
    };
    let mut alone = with(&[]);
    assert_eq!(alone.function_starts(&linked, &inside), [Some(ImageOffset(off))]);
    let r = alone.symbolize(&linked, &inside, false).remove(0);
    assert!(r.is_err() || r.as_ref().unwrap().procedure != "alpha_function", "{r:?}");
    assert_eq!(with(&["dbg"]).symbolize(&linked, &inside, false).remove(0).unwrap().procedure, "alpha_function");
    let r = with(&["other"]).symbolize(&linked, &inside, false).remove(0);
    assert!(r.is_err() || r.as_ref().unwrap().procedure != "alpha_function", "another build's debug file was used: {r:?}");
}

#[test]
fn replaced_binary_is_refused_unless_cached() {
    // Checks the build-id guard: a different file at the path is refused; a cached copy by build-id is used.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let path = dir.path().join("pie");
    let id = image(&path);
    let (_, off) = file_offset_of(&path, "beta_function");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::copy(&path, cache.join(id.build_id.as_ref().unwrap().to_hex())).unwrap();
    std::fs::copy(dir.path().join("nopie"), &path).unwrap();
    let mut s = Symbolizer::new(SymbolizerOptions::default());
    let r = s.symbolize(&id, &[ImageOffset(off)], false).remove(0);
    assert!(matches!(r, Err(Reason::BuildIdMismatch { .. })), "{r:?}");
    let mut s = Symbolizer::new(SymbolizerOptions { image_cache_dirs: vec![cache], ..Default::default() });
    assert_eq!(s.symbolize(&id, &[ImageOffset(off)], false).remove(0).unwrap().procedure, "beta_function");
}

#[test]
fn libc_from_debian_debug_package_is_fast() {
    // Checks libc symbolization (with libc6-dbg when installed) and the speed of a 50k-offset batch.
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let id = image(libc);
    let (_, off) = file_offset_of(libc, "getpid");
    let offsets: Vec<ImageOffset> = (0..50_000u64).map(|i| ImageOffset(off + (i * 7) % 0x40000)).collect();
    let mut s = Symbolizer::new(SymbolizerOptions::default());
    let t = std::time::Instant::now();
    let r = s.symbolize(&id, &offsets, true);
    let took = t.elapsed();
    assert_eq!(r[0].as_ref().unwrap().procedure, "getpid");
    let named = r.iter().filter(|x| x.is_ok()).count();
    eprintln!("50k libc offsets with lines in {took:?}, {named} named");
    assert!(named > 47_000, "{named} of 50000 named");
    assert!(took.as_secs_f64() < if cfg!(debug_assertions) { 30.0 } else { 3.0 });
}
