//! The bounded on-disk spool: batches wait here, in order, until the
//! server takes them. One file per batch, named by a sequence number so
//! the oldest sends first; when the spool is full the oldest batch is
//! dropped and counted (batches and samples), and the count survives
//! restarts in `dropped`. The directory is 0700 and the files 0600: they
//! hold process names and paths.

use crate::error::{Error, ErrorKind, Result};
use crate::rows::Batch;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What the spool lost to its bound, since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dropped {
    pub batches: u64,
    pub samples: u64,
}

pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
}

impl Spool {
    /// Opens (creating) the spool directory, which keeps at most `max_bytes` of batches.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| spool_err(dir, "create", e))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| spool_err(dir, "set permissions on", e))?;
        Ok(Spool { dir: dir.to_path_buf(), max_bytes })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a batch behind the others, first dropping the oldest ones
    /// while it would not fit. A batch larger than the whole spool is
    /// itself dropped.
    pub fn push(&self, batch: &Batch) -> Result<()> {
        self.push_keeping(batch, None)
    }

    /// [`Spool::push`], never dropping `keep` (the batch being sent now).
    pub fn push_keeping(&self, batch: &Batch, keep: Option<&Path>) -> Result<()> {
        let data = serde_json::to_vec(batch).map_err(|e| Error::new(ErrorKind::Spool, e.to_string()))?;
        let all = self.files()?;
        let seq = all.last().and_then(|(p, _)| seq_of(p)).map_or(1, |s| s + 1);
        let mut used: u64 = all.iter().map(|(_, n)| n).sum();
        let mut files: Vec<(PathBuf, u64)> = all.into_iter().filter(|(p, _)| Some(p.as_path()) != keep).collect();
        if data.len() as u64 > self.max_bytes {
            return self.count_drop(batch.samples());
        }
        while used + data.len() as u64 > self.max_bytes && !files.is_empty() {
            let (oldest, size) = files.remove(0);
            let samples = read_batch(&oldest).map(|b| b.samples()).unwrap_or(0);
            fs::remove_file(&oldest).map_err(|e| spool_err(&oldest, "remove", e))?;
            used -= size;
            self.count_drop(samples)?;
        }
        let path = self.dir.join(format!("{seq:020}.batch"));
        write_private(&path, &data)
    }

    /// The oldest batch waiting, with its file.
    pub fn oldest(&self) -> Result<Option<(PathBuf, Batch)>> {
        for (path, _) in self.files()? {
            match read_batch(&path) {
                Ok(b) => return Ok(Some((path, b))),
                // A torn write (kill -9 mid-write) is not a batch; it never reached the server.
                Err(_) => fs::remove_file(&path).map_err(|e| spool_err(&path, "remove", e))?,
            }
        }
        Ok(None)
    }

    /// Removes a batch the server has taken.
    pub fn remove(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(|e| spool_err(path, "remove", e))
    }

    /// Batches waiting.
    pub fn len(&self) -> Result<usize> {
        Ok(self.files()?.len())
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    pub fn dropped(&self) -> Dropped {
        fs::read(self.dir.join("dropped")).ok().and_then(|d| serde_json::from_slice(&d).ok()).unwrap_or_default()
    }

    fn count_drop(&self, samples: u64) -> Result<()> {
        let mut d = self.dropped();
        d.batches += 1;
        d.samples += samples;
        let path = self.dir.join("dropped");
        let tmp = self.dir.join("dropped.tmp");
        write_private(&tmp, &serde_json::to_vec(&d).expect("counts serialize"))?;
        fs::rename(&tmp, &path).map_err(|e| spool_err(&path, "replace", e))
    }

    /// Batch files, oldest first, with their sizes.
    fn files(&self) -> Result<Vec<(PathBuf, u64)>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| spool_err(&self.dir, "read", e))? {
            let entry = entry?;
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "batch") && seq_of(&path).is_some() {
                out.push((path, entry.metadata()?.len()));
            }
        }
        out.sort();
        Ok(out)
    }
}

fn seq_of(path: &Path) -> Option<u64> {
    path.file_stem()?.to_str()?.parse().ok()
}

fn read_batch(path: &Path) -> Result<Batch> {
    let data = fs::read(path).map_err(|e| spool_err(path, "read", e))?;
    serde_json::from_slice(&data).map_err(|e| Error::new(ErrorKind::Spool, format!("spooled batch {}: {e}", path.display())))
}

/// Writes a 0600 file whole, then renames it in, so readers never see half a batch.
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f =
        fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(|e| spool_err(&tmp, "create", e))?;
    f.write_all(data).and_then(|_| f.sync_data()).map_err(|e| spool_err(&tmp, "write", e))?;
    fs::rename(&tmp, path).map_err(|e| spool_err(path, "rename into", e))
}

fn spool_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Spool, format!("cannot {what} spool {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::Row;

    fn batch(count: u64) -> Batch {
        let row = Row {
            bucket: 0,
            host: "h".into(),
            label_keys: vec![],
            label_values: vec![],
            pid: 1,
            comm: "c".into(),
            kind: "elf".into(),
            image: "/x".into(),
            build_id: String::new(),
            content_hash: 0,
            event: "e".into(),
            offset: 0,
            count,
        };
        Batch::new(vec![row])
    }

    #[test]
    fn batches_leave_in_order_and_a_full_spool_drops_the_oldest() {
        // Checks FIFO order, private modes, and that the dropped counts equal exactly the batches pushed out.
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&batch(1)).unwrap().len() as u64;
        let spool = Spool::open(&dir.path().join("spool"), 3 * one).unwrap();
        assert_eq!(fs::metadata(spool.dir()).unwrap().permissions().mode() & 0o777, 0o700);
        let batches: Vec<Batch> = (1..=5).map(batch).collect();
        for b in &batches {
            spool.push(b).unwrap();
        }
        assert_eq!(spool.len().unwrap(), 3);
        assert_eq!(spool.dropped(), Dropped { batches: 2, samples: 1 + 2 });
        for want in &batches[2..] {
            let (path, got) = spool.oldest().unwrap().unwrap();
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(&got, want);
            spool.remove(&path).unwrap();
        }
        assert!(spool.oldest().unwrap().is_none());
    }
}
