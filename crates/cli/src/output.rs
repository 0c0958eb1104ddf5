//! `-o/--output FILE`: where a command's result goes. The file is created
//! (0600, private by default) on the first write, so a command that fails
//! before it has a result leaves no empty file behind.

use crate::flags::optimize::OptimizeCommand;
use crate::flags::{Command, DataCommand, TraceCmd};
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

thread_local! {
    static SERVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as answering `loupe serve` (one thread per request):
/// large JSON answers are compact (a whole machine's flame tree is 5 times
/// bigger indented: 161 MB against 33 MB) and no progress is drawn.
pub fn set_serving(on: bool) {
    SERVING.with(|c| c.set(on));
}

pub fn serving() -> bool {
    SERVING.with(|c| c.get())
}

/// `doc` as printed: indented for people, compact for the server.
pub fn json_text<T: serde::Serialize + ?Sized>(doc: &T) -> serde_json::Result<String> {
    if serving() {
        serde_json::to_string(doc)
    } else {
        serde_json::to_string_pretty(doc)
    }
}

/// The file a command was told to write its result to, if any.
pub fn path_of(c: &Command) -> Option<PathBuf> {
    let p = match c {
        Command::Top(a) => &a.output.output,
        Command::Epochs(a) => &a.output.output,
        Command::Events(a) => &a.output.output,
        Command::Calc(a) => &a.proc_.output.output,
        Command::Annotate(a) => &a.proc_.output.output,
        Command::Diff(a) => &a.sel.output.output,
        Command::Stats(a) => &a.sel.output.output,
        Command::Locks(a) => &a.output.output,
        Command::Wall(a) => &a.output.output,
        Command::Flame(a) => &a.output,
        Command::Export(a) => &a.output,
        Command::Data(a) => match &a.cmd {
            DataCommand::Profile(v) | DataCommand::Classify(v) | DataCommand::Workingset(v) => &v.output.output,
            DataCommand::History(h) => &h.output.output,
            DataCommand::Flow(f) => &f.output.output,
            DataCommand::Allocs(x) => &x.output.output,
        },
        Command::Trace(a) => match &a.cmd {
            TraceCmd::Dump(d) => &d.output.output,
            TraceCmd::Report(r) => &r.output.output,
            TraceCmd::Export(e) => return Some(e.out.clone()),
            _ => return None,
        },
        Command::Optimize(a) => match &a.command {
            OptimizeCommand::Status(s) | OptimizeCommand::Rollback(s) => &s.output.output,
            _ => return None,
        },
        _ => return None,
    };
    p.clone()
}

/// A file opened on the first write.
pub struct LazyFile {
    path: PathBuf,
    file: Option<BufWriter<File>>,
}

impl LazyFile {
    pub fn new(path: PathBuf) -> LazyFile {
        LazyFile { path, file: None }
    }

    fn open(&mut self) -> std::io::Result<&mut BufWriter<File>> {
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&self.path)?;
            self.file = Some(BufWriter::new(f));
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// Flushes what was written; a command that wrote nothing still leaves
    /// an (empty) file, as `> FILE` would.
    pub fn finish(mut self) -> Result<()> {
        let path = self.path.clone();
        let f = self.open().with_context(|| format!("cannot write {}", path.display()))?;
        f.flush().with_context(|| format!("cannot write {}", path.display()))
    }
}

impl Write for LazyFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let path = self.path.display().to_string();
        self.open().and_then(|f| f.write(buf)).map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {path}: {e}")))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}
