//! `--import-rdb FILE`: a Redis RDB file (a `dump.rdb`, a backup) loaded
//! into an empty database as the server starts, before it serves anyone:
//! the way into ScaledKV from a Redis that is not running (REPLICAOF is
//! the way from one that is). Every key of database 0 and every function
//! library goes through RESTORE and FUNCTION LOAD, as a replica's full
//! sync does (`replica::restore_all`), in one run of commits.
//!
//! The file's checksum is stored with the data it loaded, so that a
//! restart with the flag still set skips a file it already imported; any
//! other file meets a database that is no longer empty and is refused: an
//! import never merges into keys that are there.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::commands::dump::rdb::RdbFile;
use crate::replica::{restore_all, Ended, Runner};
use crate::server::Shared;

/// The imported file's fingerprint (its length and checksum).
const IMPORTED_KEY: &[u8] = b"\xff\xff\x00imported-rdb";

pub async fn import(shared: &Shared, path: &std::path::Path) -> Result<(), String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("--import-rdb {shown}: {e}"))?;
    let mut file = RdbFile::open(&bytes).map_err(|e| format!("--import-rdb {shown}: {e}"))?;
    let tail = &bytes[bytes.len().saturating_sub(8)..];
    let fingerprint = format!("{} {}", bytes.len(), tail.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let imported = shared.db.get(IMPORTED_KEY).map_err(|e| format!("cannot read the import marker: {e}"))?;
    if let Some(value) = &imported {
        if value.get(1..) == Some(fingerprint.as_bytes()) {
            tracing::info!(file = %shown, "--import-rdb: this file was imported before; not loaded again");
            return Ok(());
        }
    }
    let keys_here = shared.user_keys();
    if keys_here > 0 {
        return Err(format!(
            "--import-rdb {shown}: the database in {} holds {keys_here} keys; an import loads into an empty one \
             only (start without the flag and FLUSHALL, or use another --dir)",
            shared.config.dir.display()
        ));
    }
    let started = Instant::now();
    let mut runner = Runner::for_import(shared);
    let (keys, skipped) = match restore_all(&mut runner, &mut file, || false).await {
        Ok(counts) => counts,
        Err(Ended::Failed(error)) => return Err(format!("--import-rdb {shown}: {error}")),
        Err(Ended::Stopped) => unreachable!("an import is never stopped"),
    };
    runner.run.put_setting(IMPORTED_KEY, fingerprint.as_bytes(), imported.is_none());
    let committed = runner.commit().await;
    if !committed || runner.failures > 0 {
        return Err(format!("--import-rdb {shown}: {} commands failed (the log says which)", runner.failures));
    }
    if skipped > 0 {
        tracing::warn!(skipped, "--import-rdb: keys of databases other than 0 were not loaded");
    }
    shared.last_save.store(scaledkv::now_ms() / 1000, Ordering::Relaxed);
    tracing::info!(
        file = %shown,
        keys,
        skipped,
        bytes = bytes.len(),
        seconds = started.elapsed().as_secs_f64(),
        "imported the RDB file"
    );
    Ok(())
}
