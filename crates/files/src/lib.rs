//! Private files for everything Loupe writes: profiles hold command lines,
//! code and data addresses, so databases, spools, traces and exports are
//! created as perf writes `perf.data`: directories 0700, files 0600, set
//! explicitly so the umask neither widens nor narrows them.
//!
//! Sharing with a group is a property of a directory, not of each call: a
//! directory [`share`]d with a group is 02750 (setgid, so the kernel gives
//! everything created inside it that group), and what Loupe creates inside
//! a shared directory is 0750/0640. Callers only say *what* to create.
//!
//! ```no_run
//! use std::io::Write;
//! let dir = std::path::Path::new("/tmp/loupe-example");
//! loupe_files::create_dir_all(dir).unwrap();
//! loupe_files::create(&dir.join("profile")).unwrap().write_all(b"...").unwrap();
//! ```

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of a private directory, and of one shared with its group.
pub const DIR_MODE: u32 = 0o700;
pub const SHARED_DIR_MODE: u32 = 0o2750;
/// Mode of a private file, and of one in a directory shared with a group.
pub const FILE_MODE: u32 = 0o600;
pub const SHARED_FILE_MODE: u32 = 0o640;

/// Whether `dir` is shared with its group the way [`share`] leaves it:
/// setgid and readable by the group. (A world-writable /tmp is not.)
fn is_shared(dir: &Path) -> bool {
    fs::metadata(dir).is_ok_and(|m| m.mode() & 0o2000 != 0 && m.mode() & 0o040 != 0 && m.mode() & 0o007 == 0)
}

fn parent_shared(path: &Path) -> bool {
    path.parent().is_some_and(|p| is_shared(if p.as_os_str().is_empty() { Path::new(".") } else { p }))
}

/// The mode a new file at `path` gets.
pub fn file_mode(path: &Path) -> u32 {
    if parent_shared(path) {
        SHARED_FILE_MODE
    } else {
        FILE_MODE
    }
}

/// The mode a new directory at `path` gets.
pub fn dir_mode(path: &Path) -> u32 {
    if parent_shared(path) {
        SHARED_DIR_MODE
    } else {
        DIR_MODE
    }
}

/// Options that create `path` with its private mode (truncating it).
fn options(path: &Path) -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true).mode(file_mode(path));
    o
}

/// Sets the mode on an open file when it is not already that (the umask
/// may have taken bits away; an existing file keeps its old mode otherwise).
fn fix_mode(f: &File, mode: u32) -> io::Result<()> {
    if f.metadata()?.mode() & 0o7777 != mode {
        f.set_permissions(Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Creates (or truncates) a file for writing, 0600 or 0640 in a shared directory.
pub fn create(path: &Path) -> io::Result<File> {
    let f = options(path).open(path)?;
    fix_mode(&f, file_mode(path))?;
    Ok(f)
}

/// Creates a file that must not exist yet (`O_EXCL`), readable and writable.
pub fn create_new(path: &Path) -> io::Result<File> {
    let mode = file_mode(path);
    let f = OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(path)?;
    fix_mode(&f, mode)?;
    Ok(f)
}

/// Opens a file for appending, creating it private if it does not exist.
pub fn append(path: &Path) -> io::Result<File> {
    let mode = file_mode(path);
    let existed = path.exists();
    let f = OpenOptions::new().create(true).append(true).mode(mode).open(path)?;
    if !existed {
        fix_mode(&f, mode)?;
    }
    Ok(f)
}

/// Opens a file for reading and writing without truncating it (lock files),
/// creating it private if it does not exist.
pub fn open_rw(path: &Path) -> io::Result<File> {
    let mode = file_mode(path);
    let existed = path.exists();
    let f = OpenOptions::new().create(true).truncate(false).read(true).write(true).mode(mode).open(path)?;
    if !existed {
        fix_mode(&f, mode)?;
    }
    Ok(f)
}

/// `fs::write` with a private file.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    use std::io::Write;
    create(path)?.write_all(bytes.as_ref())
}

/// `fs::copy` whose copy is private (`fs::copy` would take the source's mode).
pub fn copy(from: &Path, to: &Path) -> io::Result<u64> {
    let n = fs::copy(from, to)?;
    fs::set_permissions(to, Permissions::from_mode(file_mode(to)))?;
    Ok(n)
}

/// Creates one directory, 0700 (02750 inside a shared one).
pub fn create_dir(path: &Path) -> io::Result<()> {
    let mode = dir_mode(path);
    fs::DirBuilder::new().mode(mode).create(path)?;
    fs::set_permissions(path, Permissions::from_mode(mode))
}

/// Creates a directory and its missing parents, each 0700 (or shared like
/// its parent); directories that exist keep their modes.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    if path.as_os_str().is_empty() || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        create_dir_all(parent)?;
    }
    match create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        r => r,
    }
}

/// Sets the mode of something Loupe just created (a socket, a file another
/// library wrote) to its private mode.
pub fn restrict(path: &Path) -> io::Result<()> {
    let mode = if path.is_dir() { dir_mode(path) } else { file_mode(path) };
    fs::set_permissions(path, Permissions::from_mode(mode))
}

/// The id of a group by name (or number), as `chgrp` takes it.
pub fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(n) = name.parse() {
        return Ok(n);
    }
    let cname = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "group name with a NUL byte"))?;
    // SAFETY: getgrnam takes a NUL-terminated string and returns a pointer
    // to static storage or null; we read one field before any other call.
    let g = unsafe { libc::getgrnam(cname.as_ptr()) };
    if g.is_null() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no group named {name:?}")));
    }
    // SAFETY: `g` is non-null and points to a valid `struct group`.
    Ok(unsafe { (*g).gr_gid })
}

/// Shares `dir` and everything in it with group `gid`: directories 02750,
/// files 0640, group `gid`. What is created inside later follows (setgid).
pub fn share(dir: &Path, gid: u32) -> io::Result<()> {
    chgrp(dir, gid)?;
    let meta = fs::symlink_metadata(dir)?;
    if meta.is_dir() {
        fs::set_permissions(dir, Permissions::from_mode(SHARED_DIR_MODE))?;
        for entry in fs::read_dir(dir)? {
            share(&entry?.path(), gid)?;
        }
    } else if meta.is_file() {
        fs::set_permissions(dir, Permissions::from_mode(SHARED_FILE_MODE))?;
    } else if meta.file_type().is_socket() {
        fs::set_permissions(dir, Permissions::from_mode(0o660))?;
    }
    Ok(())
}

fn chgrp(path: &Path, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, None, Some(gid))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot give {} to group {gid}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().mode() & 0o7777
    }

    /// Runs `f` with umask `m`, restoring the previous one.
    fn with_umask<T>(m: libc::mode_t, f: impl FnOnce() -> T) -> T {
        // SAFETY: umask has no preconditions; tests in this module all set it the same way.
        let old = unsafe { libc::umask(m) };
        let r = f();
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        r
    }

    #[test]
    fn modes_are_private_whatever_the_umask() {
        // Checks 0700/0600 under umask 000 (which would give 0777/0666) and 077.
        for umask in [0o000, 0o077] {
            let t = tempfile::tempdir().unwrap();
            let d = t.path().join("a/b");
            with_umask(umask, || {
                create_dir_all(&d).unwrap();
                write(&d.join("f"), b"x").unwrap();
                copy(&d.join("f"), &d.join("g")).unwrap();
                append(&d.join("log")).unwrap();
            });
            assert_eq!((mode(&t.path().join("a")), mode(&d)), (0o700, 0o700), "umask {umask:o}");
            for f in ["f", "g", "log"] {
                assert_eq!(mode(&d.join(f)), 0o600, "{f} under umask {umask:o}");
            }
        }
    }

    #[test]
    fn sharing_a_directory_carries_over_to_what_is_created_later() {
        // Checks share(): 02750/0640 now, and new files and directories inside follow, under umask 077.
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("db");
        create_dir_all(&d.join("old")).unwrap();
        write(&d.join("old/f"), b"x").unwrap();
        // SAFETY: getegid has no preconditions.
        let gid = unsafe { libc::getegid() };
        share(&d, gid).unwrap();
        with_umask(0o077, || {
            create_dir(&d.join("new")).unwrap();
            write(&d.join("new/f"), b"x").unwrap();
        });
        for dir in ["old", "new"] {
            assert_eq!(mode(&d.join(dir)), 0o2750, "{dir}");
            assert_eq!(mode(&d.join(dir).join("f")), 0o640, "{dir}/f");
        }
    }

    #[test]
    fn group_names_resolve_and_unknown_ones_say_so() {
        // Checks that `root` is group 0 and that a missing group's error names it.
        assert_eq!(group_id("root").unwrap(), 0);
        assert_eq!(group_id("42").unwrap(), 42);
        let e = group_id("no-such-group-loupe").unwrap_err();
        assert!(e.to_string().contains("no-such-group-loupe"), "{e}");
    }
}
