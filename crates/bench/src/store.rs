//! The engines a benchmark can drive, behind one small trait.

use std::path::Path;

use scaledkv::{Db, Options, WriteBatch};

pub trait Store: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String>;
    /// Applies several puts as one atomic batch.
    fn put_batch(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<(), String>;
    /// Calls `found` with the value's length when the key exists.
    fn get(&self, key: &[u8]) -> Result<Option<usize>, String>;
    fn delete(&self, key: &[u8]) -> Result<(), String>;
    /// Lends the value of `key` to `visit` (YCSB decodes records in place);
    /// false if there is none.
    fn get_with(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool, String>;
    /// Lends up to `limit` entries from `start` on, in key order, to `visit`.
    fn scan_with(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String>;
    /// Visits up to `limit` entries from `start` (or from an end) in key
    /// order; returns (entries, bytes) visited.
    fn scan(&self, start: Option<&[u8]>, limit: usize, reverse: bool) -> Result<(usize, usize), String>;
    /// Compacts the whole database, as db_bench's `compact` does
    /// (RocksDB's `CompactRange` over every key).
    fn compact(&self) -> Result<(), String>;
    /// One line describing engine settings for the report header.
    fn describe(&self) -> String;
    /// Extra lines for the end of the report (statistics).
    fn report(&self) -> Vec<String> {
        Vec::new()
    }
}

pub struct ScaledKv {
    pub db: Db,
    open_ms: f64,
}

impl ScaledKv {
    pub fn open(path: &Path, options: Options, fresh: bool) -> Result<ScaledKv, String> {
        if fresh && path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let started = std::time::Instant::now();
        let db = Db::open(path, options).map_err(|e| e.to_string())?;
        Ok(ScaledKv { db, open_ms: started.elapsed().as_secs_f64() * 1e3 })
    }
}

impl Store for ScaledKv {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.db.put(key, value).map_err(|e| e.to_string())
    }

    fn put_batch(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<(), String> {
        let mut batch = WriteBatch::new();
        for (key, value) in entries {
            batch.put(key, value);
        }
        self.db.write(batch).map_err(|e| e.to_string())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
        // Pinned: like db_bench's Get into a PinnableSlice, no value copy.
        self.db.get_pinned(key).map(|v| v.map(|v| v.len())).map_err(|e| e.to_string())
    }

    fn delete(&self, key: &[u8]) -> Result<(), String> {
        self.db.delete(key).map_err(|e| e.to_string())
    }

    fn get_with(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool, String> {
        let value = self.db.get_pinned(key).map_err(|e| e.to_string())?;
        Ok(value.map(|value| visit(&value)).is_some())
    }

    fn scan_with(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String> {
        let mut iter = self.db.range(start..);
        for _ in 0..limit {
            let Some(kv) = iter.next_ref() else { break };
            let (key, value) = kv.map_err(|e| e.to_string())?;
            visit(key, value);
        }
        Ok(())
    }

    /// The index rebuilt with full nodes, and a garbage-collection pass.
    fn compact(&self) -> Result<(), String> {
        self.db.compact_index();
        self.db.collect_garbage().map(|_| ()).map_err(|e| e.to_string())
    }

    fn scan(&self, start: Option<&[u8]>, limit: usize, reverse: bool) -> Result<(usize, usize), String> {
        let mut iter = match (start, reverse) {
            (Some(start), false) => self.db.range(start..),
            (Some(start), true) => self.db.range_rev(..=start),
            (None, false) => self.db.iter(),
            (None, true) => self.db.range_rev::<&[u8], _>(..),
        };
        let (mut entries, mut bytes) = (0, 0);
        // Lent, not copied: what RocksDB's raw iterator (the other side of
        // the comparison) hands out too.
        while entries < limit {
            let Some(kv) = iter.next_ref() else { break };
            let (key, value) = kv.map_err(|e| e.to_string())?;
            entries += 1;
            bytes += key.len() + value.len();
        }
        Ok((entries, bytes))
    }

    fn describe(&self) -> String {
        let stats = self.db.stats();
        let report = self.db.recovery_report();
        format!(
            "ScaledKV:   durability={} medium={} persist={}\nOpen:       {:.0} ms, {} keys ({} from the checkpoint, {} frames / {:.1} MB replayed{})",
            stats.durability,
            stats.medium,
            stats.persist_method,
            self.open_ms,
            stats.keys,
            report.checkpoint_keys,
            report.replayed_frames,
            report.replayed_bytes as f64 / 1e6,
            if report.truncated.is_some() { ", torn tail truncated" } else { "" },
        )
    }

    fn report(&self) -> Vec<String> {
        let s = self.db.stats();
        vec![format!(
            "stats: keys={} live={:.1}MB log={:.1}MB segments={} (recycled {}) space-amp={:.2} write-amp={:.2} index={:.1}MB ({:.1} B/key est.) gc-copied={:.1}MB gc-maps={:.1}MB gc-stalls={} ({:.2} s) roll-waits={} ({:.3} s) checkpoints={} ({} deltas, {:.1}MB) groups={} ({:.1} writes/group)",
            s.keys,
            s.live_bytes as f64 / 1e6,
            s.log_bytes as f64 / 1e6,
            s.segments,
            s.segments_recycled,
            s.space_amplification,
            s.write_amplification,
            s.index_memory_bytes as f64 / 1e6,
            s.index_bytes_per_key,
            s.gc_bytes_written as f64 / 1e6,
            s.gc_map_bytes as f64 / 1e6,
            s.gc_stalled_writes,
            s.gc_stall_micros as f64 / 1e6,
            s.roll_waits,
            s.roll_wait_micros as f64 / 1e6,
            s.checkpoints,
            s.delta_checkpoints,
            s.checkpoint_bytes_written as f64 / 1e6,
            s.commit_groups,
            s.committed_requests as f64 / s.commit_groups.max(1) as f64,
        )]
    }
}

#[cfg(feature = "rocksdb")]
pub mod rocks {
    //! RocksDB built from source with optimizations (librocksdb-sys), set up
    //! like db_bench: no compression, a block cache that holds the data.
    use super::Store;
    use std::path::Path;

    pub struct Rocks {
        db: rocksdb::DB,
        write_options: rocksdb::WriteOptions,
        settings: String,
    }

    impl Rocks {
        pub fn open(
            path: &Path,
            sync: bool,
            disable_wal: bool,
            cache_bytes: usize,
            fresh: bool,
        ) -> Result<Rocks, String> {
            if fresh && path.exists() {
                std::fs::remove_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let mut options = rocksdb::Options::default();
            options.create_if_missing(true);
            options.set_compression_type(rocksdb::DBCompressionType::None);
            let mut table = rocksdb::BlockBasedOptions::default();
            table.set_block_cache(&rocksdb::Cache::new_lru_cache(cache_bytes));
            options.set_block_based_table_factory(&table);
            let db = rocksdb::DB::open(&options, path).map_err(|e| e.to_string())?;
            let mut write_options = rocksdb::WriteOptions::default();
            write_options.set_sync(sync);
            write_options.disable_wal(disable_wal);
            let settings = format!(
                "RocksDB:    release build {} sync={} disable_wal={} cache={}MB compression=none",
                "(rust-rocksdb)",
                sync as u8,
                disable_wal as u8,
                cache_bytes >> 20
            );
            Ok(Rocks { db, write_options, settings })
        }
    }

    impl Store for Rocks {
        fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
            self.db.put_opt(key, value, &self.write_options).map_err(|e| e.to_string())
        }

        fn put_batch(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<(), String> {
            let mut batch = rocksdb::WriteBatch::default();
            for (key, value) in entries {
                batch.put(key, value);
            }
            self.db.write_opt(batch, &self.write_options).map_err(|e| e.to_string())
        }

        fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
            self.db.get_pinned(key).map(|v| v.map(|v| v.len())).map_err(|e| e.to_string())
        }

        fn delete(&self, key: &[u8]) -> Result<(), String> {
            self.db.delete_opt(key, &self.write_options).map_err(|e| e.to_string())
        }

        fn get_with(&self, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> Result<bool, String> {
            let value = self.db.get_pinned(key).map_err(|e| e.to_string())?;
            Ok(value.map(|value| visit(&value)).is_some())
        }

        fn scan_with(&self, start: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<(), String> {
            let mut iter = self.db.raw_iterator();
            iter.seek(start);
            for _ in 0..limit {
                let (Some(key), Some(value)) = (iter.key(), iter.value()) else { break };
                visit(key, value);
                iter.next();
            }
            iter.status().map_err(|e| e.to_string())
        }

        fn compact(&self) -> Result<(), String> {
            self.db.compact_range::<&[u8], &[u8]>(None, None);
            Ok(())
        }

        fn scan(&self, start: Option<&[u8]>, limit: usize, reverse: bool) -> Result<(usize, usize), String> {
            let mut iter = self.db.raw_iterator();
            match (start, reverse) {
                (Some(start), false) => iter.seek(start),
                (Some(start), true) => iter.seek_for_prev(start),
                (None, false) => iter.seek_to_first(),
                (None, true) => iter.seek_to_last(),
            }
            let (mut entries, mut bytes) = (0, 0);
            while iter.valid() && entries < limit {
                bytes += iter.key().map_or(0, |k| k.len()) + iter.value().map_or(0, |v| v.len());
                entries += 1;
                if reverse {
                    iter.prev()
                } else {
                    iter.next()
                }
            }
            iter.status().map_err(|e| e.to_string())?;
            Ok((entries, bytes))
        }

        fn describe(&self) -> String {
            self.settings.clone()
        }
    }
}
