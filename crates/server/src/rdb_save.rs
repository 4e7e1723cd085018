//! SAVE, BGSAVE and SHUTDOWN SAVE write the data set as an RDB file,
//! `dump.rdb` (CONFIG SET `dbfilename`) in the data directory, as Redis
//! does: what backup scripts copy after a BGSAVE, and what `redis-server`
//! loads. The file is one moment (`commands::dump::export`), written
//! beside it, synced, then renamed over the old one, so a crash leaves the
//! old file or the new one, never half of one (a temporary file left by a
//! crash ends in `.tmp`, which the engine deletes when it opens). Every
//! write is already durable in the log: the file is a copy, not what the
//! server starts from.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::commands::dump::export::{export, Exported};
use crate::server::Shared;

/// Redis's `dbfilename` unless CONFIG SET changes it.
pub const DEFAULT_DBFILENAME: &str = "dump.rdb";

pub struct Saves {
    /// The file's name in the data directory.
    pub dbfilename: Mutex<String>,
    state: Mutex<State>,
    /// BGSAVE asks `background_saves` for a file.
    requested: tokio::sync::Notify,
    /// Temporary files' numbers, unique within the process.
    next_temp: AtomicU64,
    /// The engine's sequence number of the last file's moment (at start:
    /// the server's first), for `rdb_changes_since_last_save`.
    pub saved_seq: AtomicU64,
}

struct State {
    /// A SAVE or BGSAVE writing its file, since when.
    running: Option<Instant>,
    /// BGSAVE SCHEDULE arrived while one ran: another follows it.
    scheduled: bool,
    last_ok: bool,
    last_seconds: Option<u64>,
    saves: u64,
}

impl Default for Saves {
    fn default() -> Self {
        Saves {
            dbfilename: Mutex::new(DEFAULT_DBFILENAME.into()),
            state: Mutex::new(State { running: None, scheduled: false, last_ok: true, last_seconds: None, saves: 0 }),
            requested: tokio::sync::Notify::new(),
            next_temp: AtomicU64::new(0),
            saved_seq: AtomicU64::new(0),
        }
    }
}

const IN_PROGRESS: &str = "ERR Background save already in progress";

impl Saves {
    /// BGSAVE: its reply, or Redis's error while one runs (SCHEDULE: the
    /// next starts when it ends).
    pub fn background(&self, schedule: bool) -> Result<&'static str, &'static str> {
        let mut state = self.state.lock();
        if state.running.is_some() {
            if schedule {
                state.scheduled = true;
                return Ok("Background saving scheduled");
            }
            return Err(IN_PROGRESS);
        }
        state.running = Some(Instant::now());
        drop(state);
        self.requested.notify_one();
        Ok("Background saving started")
    }

    /// SAVE, SHUTDOWN SAVE: the file written now, on the caller's thread.
    pub fn now(&self, shared: &Shared) -> Result<(), String> {
        {
            let mut state = self.state.lock();
            if state.running.is_some() {
                return Err(IN_PROGRESS.into());
            }
            state.running = Some(Instant::now());
        }
        self.finish(shared, write_file(shared), false).0
    }

    /// Notes how a save ended; with `background`, also whether BGSAVE
    /// SCHEDULE asked for another meanwhile: then it counts as running
    /// from now (under the same lock, so no SAVE starts in between).
    fn finish(
        &self,
        shared: &Shared,
        result: Result<Exported, String>,
        background: bool,
    ) -> (Result<(), String>, bool) {
        let mut state = self.state.lock();
        let started = state.running.take().unwrap_or_else(Instant::now);
        state.last_seconds = Some(started.elapsed().as_secs());
        state.last_ok = result.is_ok();
        let again = background && std::mem::take(&mut state.scheduled);
        if again {
            state.running = Some(Instant::now());
        }
        let result = match result {
            Ok(exported) => {
                state.saves += 1;
                self.saved_seq.store(exported.seq, Ordering::Relaxed);
                shared.last_save.store(scaledkv::now_ms() / 1000, Ordering::Relaxed);
                tracing::info!(keys = exported.keys, bytes = exported.bytes, "DB saved on disk");
                Ok(())
            }
            Err(error) => {
                tracing::error!(%error, "the RDB file was not written");
                Err(error)
            }
        };
        (result, again)
    }

    /// INFO persistence's lines about it; `last_seq`: the engine's now.
    pub fn info(&self, last_seq: u64) -> String {
        let state = self.state.lock();
        format!(
            "rdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\n\
             rdb_current_bgsave_time_sec:{}\r\nrdb_saves:{}\r\n",
            last_seq.saturating_sub(self.saved_seq.load(Ordering::Relaxed)),
            u8::from(state.running.is_some()),
            if state.last_ok { "ok" } else { "err" },
            state.last_seconds.map_or(-1, |s| s as i64),
            state.running.map_or(-1, |at| at.elapsed().as_secs() as i64),
            state.saves,
        )
    }
}

/// Writes the files BGSAVE asks for, one at a time, for the server's life.
pub async fn background_saves(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = shared.saves.requested.notified() => {}
            _ = shutdown.changed() => return,
        }
        loop {
            let saving = shared.clone();
            let result = tokio::task::spawn_blocking(move || write_file(&saving))
                .await
                .unwrap_or_else(|error| Err(format!("the saving thread failed: {error}")));
            if !shared.saves.finish(&shared, result, true).1 {
                break;
            }
        }
    }
}

/// An index checkpoint, then the file: written beside it, synced, renamed
/// over it, the directory synced.
fn write_file(shared: &Shared) -> Result<Exported, String> {
    shared.db.flush().map_err(|error| error.to_string())?;
    let dir = &shared.config.dir;
    let name = shared.saves.dbfilename.lock().clone();
    let number = shared.saves.next_temp.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!("temp-{}-{number}.rdb.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&temp).map_err(|e| format!("cannot create {}: {e}", temp.display()))?;
        let mut failed = None;
        let exported = export(shared, &shared.db.snapshot(), 1 << 20, true, |piece| match file.write_all(&piece) {
            Ok(()) => true,
            Err(error) => {
                failed = Some(error);
                false
            }
        })
        .map_err(|error| error.text())?;
        let Some(exported) = exported else {
            let error = failed.map_or_else(|| "stopped".into(), |e| e.to_string());
            return Err(format!("cannot write {}: {error}", temp.display()));
        };
        file.sync_all().map_err(|e| format!("cannot sync {}: {e}", temp.display()))?;
        let path = dir.join(&name);
        std::fs::rename(&temp, &path).map_err(|e| format!("cannot rename to {}: {e}", path.display()))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
        Ok(exported)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// CONFIG SET dbfilename: a file name, not a path (Redis's rule).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}
