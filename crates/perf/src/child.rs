//! Starting a command held at a gate, so sampling events exist before it
//! runs its first instruction.

use crate::{Error, ErrorKind};
use std::ffi::CString;

pub struct GatedChild {
    pub pid: i32,
    gate: Option<i32>,
    status: Option<i32>,
}

fn os_err(what: &str) -> Error {
    Error::new(ErrorKind::Io, format!("{what}: {}", std::io::Error::last_os_error()))
}

impl GatedChild {
    /// Forks; the child waits for [`GatedChild::release`], then execs
    /// `program` (searched in PATH). stdin/stdout/stderr are inherited.
    pub fn spawn(program: &str, args: &[String]) -> Result<GatedChild, Error> {
        let prog = CString::new(program).map_err(|_| Error::new(ErrorKind::Io, "command contains a NUL byte".into()))?;
        let mut argv: Vec<CString> = vec![prog.clone()];
        for a in args {
            argv.push(CString::new(a.as_str()).map_err(|_| Error::new(ErrorKind::Io, "argument contains a NUL byte".into()))?);
        }
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let not_found = format!("loupe: command not found: {program}\n");
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(os_err("pipe"));
        }
        // SAFETY: after fork the child only calls async-signal-safe functions
        // (read, close, execvp, write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(os_err("fork"));
        }
        if pid == 0 {
            // SAFETY: see above; this branch never returns.
            unsafe {
                libc::close(fds[1]);
                let mut b = 0u8;
                let n = libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1);
                if n != 1 {
                    libc::_exit(126);
                }
                libc::execvp(prog.as_ptr(), argv_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                let code = if errno == libc::ENOENT { 127 } else { 126 };
                libc::write(2, not_found.as_ptr() as *const libc::c_void, not_found.len());
                libc::_exit(code);
            }
        }
        // SAFETY: closing our copy of the read end.
        unsafe { libc::close(fds[0]) };
        Ok(GatedChild { pid, gate: Some(fds[1]), status: None })
    }

    /// Lets the child exec.
    pub fn release(&mut self) -> Result<(), Error> {
        if let Some(fd) = self.gate.take() {
            let b = 1u8;
            // SAFETY: writing one byte from a live local to our pipe fd, then closing it.
            let n = unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
            // SAFETY: fd is ours and closed once.
            unsafe { libc::close(fd) };
            if n != 1 {
                return Err(os_err("releasing the child"));
            }
        }
        Ok(())
    }

    fn decode(status: i32) -> i32 {
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else if libc::WIFSIGNALED(status) {
            128 + libc::WTERMSIG(status)
        } else {
            1
        }
    }

    /// Exit status as a shell reports it: the code, or 128 + signal.
    pub fn wait(&mut self) -> Result<i32, Error> {
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            self.waitpid(0)?;
        }
    }

    pub fn try_wait(&mut self) -> Result<Option<i32>, Error> {
        if self.status.is_none() {
            self.waitpid(libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    fn waitpid(&mut self, flags: i32) -> Result<(), Error> {
        let mut st = 0;
        // SAFETY: waitpid on our own child, writing into a local.
        let r = unsafe { libc::waitpid(self.pid, &mut st, flags) };
        if r == self.pid {
            self.status = Some(Self::decode(st));
        } else if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::new(ErrorKind::Io, format!("waitpid: {e}")));
            }
        }
        Ok(())
    }
}

impl Drop for GatedChild {
    /// A child never released (an error before sampling started) is killed
    /// rather than left waiting at the gate.
    fn drop(&mut self) {
        if let Some(fd) = self.gate.take() {
            // SAFETY: killing and reaping our own unreleased child; closing our fd.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::close(fd);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_and_missing_command() {
        // Checks shell-like status codes: the command's own code, 127 for a missing command.
        let mut c = GatedChild::spawn("/bin/sh", &["-c".into(), "exit 3".into()]).unwrap();
        c.release().unwrap();
        assert_eq!(c.wait().unwrap(), 3);
        let mut c = GatedChild::spawn("no-such-command-loupe", &[]).unwrap();
        c.release().unwrap();
        assert_eq!(c.wait().unwrap(), 127);
        let mut c = GatedChild::spawn("/bin/sh", &["-c".into(), "kill -TERM $$".into()]).unwrap();
        c.release().unwrap();
        assert_eq!(c.wait().unwrap(), 128 + 15);
    }
}
