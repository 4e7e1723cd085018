//! The process as Redis's `daemonize`, `pidfile` and `logfile` settings
//! shape it: detached from the terminal, its id in a file while it runs,
//! its log in a file.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// Detaches the process from its terminal (the parent exits at once,
/// with success, as redis-server's does; stdio goes to /dev/null). Must
/// run before any thread starts: only the calling thread survives a fork.
pub fn daemonize() -> Result<(), String> {
    // SAFETY: daemon(3) forks and the parent exits; called from main
    // before any other thread exists.
    if unsafe { libc::daemon(1, 0) } != 0 {
        return Err(format!("cannot daemonize: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The log file, opened for appending (created if missing).
pub fn open_log(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("Can't open the log file {}: {e}", path.display()))
}

/// The pid file while the server runs: written as it starts, removed when
/// dropped (the server's clean exit), as Redis's.
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    pub fn create(path: &Path) -> Result<PidFile, String> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write the pid file {}: {e}", path.display()))?;
        Ok(PidFile { path: path.to_path_buf() })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
