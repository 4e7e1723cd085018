//! The SSD tier (`Options::ssd_tier`): a second directory for the log, for
//! data sets larger than the log's own medium (DRAM, persistent memory).
//!
//! When the log outgrows `Options::cache_capacity_bytes`, its oldest
//! sealed segment moves whole to the tier under the same id, so no index
//! pointer changes (segment ids are stable). The move is cache mode's
//! eviction with another fate for what it lets go: the collector scans the
//! segment, copies forward what the eviction filter gives a second chance
//! and was read since written (those stay in the fast tier), drops what
//! expired, and leaves the rest where it is, copying the segment's bytes to
//! the tier piece by piece as it goes. Then the copy is made durable, takes
//! the segment's name in the tier, and replaces the segment in the table;
//! the original file goes once the last reader lets go of it.
//!
//! Reads of a demoted entry map the tier's file (the page cache of an SSD
//! file system): one page fault where the fast tier needs none. A read
//! marks the entry, as in cache mode, and the tier has a capacity of its
//! own: past it, its oldest segment is evicted as cache mode evicts, and
//! an entry read while in the tier is copied back to the head of the log
//! (promotion) instead of being dropped. With no capacity (0) the tier is
//! unbounded and nothing is evicted: a store larger than memory.
//!
//! Crash safety: a copy takes its name only once whole and durable, and
//! the original is removed only after that, so a crash leaves the segment
//! in the fast tier, or in both (open keeps the tier's copy and removes the
//! other), or in the tier alone; a half-made copy has a `.tmp` name, which
//! open removes. The two directories name each other (`SSD_TIER` in the
//! database's, `SSD_TIER_OF` in the tier's): open refuses a database
//! without its tier, and a tier that holds another database's segments,
//! whose ids would collide.
//!
//! Not done: GC of a segment in the tier copies its live entries to the
//! head of the log, which demotes them again later; the tier's reads go
//! through the page cache (memory outside the cache's capacity that the
//! kernel reclaims), not positioned reads into buffers of our own.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::db::Inner;
use crate::error::{Error, Result};
use crate::log::segment::{list_segment_files, segment_file_name, sync_name, Segment, SEGMENT_HEADER_BYTES};
use crate::options::{Durability, SsdTier};

/// In the database's directory: the path of its SSD tier.
const TIER_FILE: &str = "SSD_TIER";
/// In the SSD tier's directory: the path of its database.
const OWNER_FILE: &str = "SSD_TIER_OF";

/// A segment's copy into the SSD tier, under a `.tmp` name until whole.
pub(crate) struct Demotion {
    file: File,
    staging: PathBuf,
    dir: PathBuf,
    /// Bytes of the segment copied so far, from its start.
    copied: usize,
    named: bool,
}

impl Demotion {
    pub(crate) fn start(dir: &Path, segment: &Segment) -> Result<Demotion> {
        let staging = dir.join(format!("demote-{:08}.tmp", segment.id));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&staging)
            .map_err(Error::io(&staging, "create"))?;
        let mut demotion = Demotion { file, staging, dir: dir.to_path_buf(), copied: 0, named: false };
        demotion.copy(&segment.region.as_slice()[..SEGMENT_HEADER_BYTES])?;
        Ok(demotion)
    }

    /// Copies what `bytes` (the segment from its start, as far as it has
    /// been scanned) holds beyond what is already copied.
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > self.copied {
            let at = self.copied;
            self.file.write_all_at(&bytes[at..], at as u64).map_err(Error::io(&self.staging, "write"))?;
            self.copied = bytes.len();
        }
        Ok(())
    }
}

impl Drop for Demotion {
    /// An abandoned copy (the segment emptied, or an error) goes.
    fn drop(&mut self) {
        if !self.named {
            let _ = std::fs::remove_file(&self.staging);
        }
    }
}

impl Inner {
    /// Makes the copy of the fully scanned `segment` durable, names it,
    /// and puts it in the segment's place.
    pub(crate) fn finish_demotion(&self, mut demotion: Demotion, segment: &Arc<Segment>) -> Result<()> {
        let durability = self.options.durability;
        let staging = demotion.staging.clone();
        // The rest of the segment is zeros, as the log's end reads.
        demotion.file.set_len(segment.capacity_bytes() as u64).map_err(Error::io(&staging, "set_len"))?;
        if durability != Durability::Buffered {
            demotion.file.sync_data().map_err(Error::io(&staging, "fdatasync"))?;
        }
        let path = demotion.dir.join(segment_file_name(segment.id));
        std::fs::rename(&staging, &path).map_err(Error::io(&staging, "rename"))?;
        demotion.named = true;
        sync_name(&demotion.dir, durability)?;
        let cold = Arc::new(segment.demoted(&path, durability)?);
        let bytes = cold.written_bytes.load(Ordering::Relaxed);
        if let Some(original) = self.segments.insert(cold) {
            // Reused as a later segment once no reader holds it (its pages
            // already allocated, `Recycler`), else removed. Until then a
            // crash finds it in both directories, which open resolves.
            self.recycler.keep_or_delete(original, self.options.segment_size_bytes);
        }
        self.counters.demoted_segments.fetch_add(1, Ordering::Relaxed);
        self.counters.demoted_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }
}

/// Checks that the database in `dir` and `tier` belong together, as the
/// files each keeps of the other say, and records it the first time;
/// removes half-made copies. Called by open before recovery.
pub(crate) fn bind(dir: &Path, tier: Option<&SsdTier>) -> Result<()> {
    let dir = canonical(dir)?;
    let recorded = read_marker(&dir.join(TIER_FILE))?;
    let Some(tier) = tier else {
        return match recorded {
            None => Ok(()),
            Some(path) => Err(Error::InvalidOptions(format!(
                "{} keeps part of its log in the SSD tier {}: open it with that tier",
                dir.display(),
                path.display()
            ))),
        };
    };
    std::fs::create_dir_all(&tier.dir).map_err(Error::io(&tier.dir, "create_dir"))?;
    let tier_dir = canonical(&tier.dir)?;
    if let Some(path) = recorded.as_ref().filter(|path| **path != tier_dir) {
        return Err(Error::InvalidOptions(format!(
            "{} keeps part of its log in the SSD tier {}, not {}",
            dir.display(),
            path.display(),
            tier_dir.display()
        )));
    }
    match read_marker(&tier_dir.join(OWNER_FILE))? {
        Some(owner) if owner != dir => {
            return Err(Error::InvalidOptions(format!(
                "{} is the SSD tier of {}, not of {}",
                tier_dir.display(),
                owner.display(),
                dir.display()
            )));
        }
        Some(_) => {}
        None => {
            if !list_segment_files(&tier_dir)?.is_empty() {
                return Err(Error::InvalidOptions(format!(
                    "{} holds log segments of no known database: choose an empty directory for the SSD tier",
                    tier_dir.display()
                )));
            }
            write_marker(&tier_dir, OWNER_FILE, &dir)?;
        }
    }
    if recorded.is_none() {
        write_marker(&dir, TIER_FILE, &tier_dir)?;
    }
    for entry in std::fs::read_dir(&tier_dir).map_err(Error::io(&tier_dir, "read_dir"))? {
        let entry = entry.map_err(Error::io(&tier_dir, "read_dir"))?;
        if entry.file_name().to_str().is_some_and(|name| name.ends_with(".tmp")) {
            std::fs::remove_file(entry.path()).map_err(Error::io(entry.path(), "remove"))?;
        }
    }
    Ok(())
}

fn canonical(path: &Path) -> Result<PathBuf> {
    path.canonicalize().map_err(Error::io(path, "canonicalize"))
}

fn read_marker(path: &Path) -> Result<Option<PathBuf>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(PathBuf::from(text.trim_end_matches('\n')))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Error::io(path, "read")(error)),
    }
}

/// Writes `dir/name` holding `path`, atomically and durably.
fn write_marker(dir: &Path, name: &str, path: &Path) -> Result<()> {
    let staging = dir.join(format!("{name}.tmp"));
    let text = format!("{}\n", path.display());
    let file = File::create(&staging).map_err(Error::io(&staging, "create"))?;
    file.write_all_at(text.as_bytes(), 0).map_err(Error::io(&staging, "write"))?;
    file.sync_all().map_err(Error::io(&staging, "fsync"))?;
    let target = dir.join(name);
    std::fs::rename(&staging, &target).map_err(Error::io(&staging, "rename"))?;
    scaledkv_pmem::sync_dir(dir).map_err(Error::io(dir, "fsync dir"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::testing::{kept_hot_and_cold, put, value, write_reading_every_20th};
    use crate::{Db, Error, Options, SsdTier};

    const SEGMENT: usize = 64 * 1024;
    const CAPACITY: u64 = 8 * SEGMENT as u64;

    /// Eight 64 KiB segments in the fast tier, the rest in `tier` (with
    /// `tier_capacity`, 0: unbounded); no background work: writers demote.
    fn options(tier: &Path, tier_capacity: u64) -> Options {
        Options {
            background_work: false,
            segment_size_bytes: SEGMENT,
            cache_capacity_bytes: CAPACITY,
            ssd_tier: Some(SsdTier { dir: tier.to_path_buf(), capacity_bytes: tier_capacity }),
            ..Options::default()
        }
    }

    fn segment_files(dir: &Path) -> usize {
        crate::log::segment::list_segment_files(dir).unwrap().len()
    }

    /// 4,000 keys (about 8x the fast tier), every tenth rewritten: the fast
    /// tier stays within its capacity, nothing is evicted, every key reads
    /// its newest value (from the SSD tier for most), a snapshot taken
    /// before the moves still reads what it saw, and so does a reopen.
    #[test]
    fn a_store_larger_than_its_fast_tier_keeps_every_key() {
        let (dir, tier) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let db = Db::open(dir.path(), options(tier.path(), 0)).unwrap();
        for key in 0..100u32 {
            put(&db, key, 0);
        }
        let snapshot = db.snapshot();
        let mut most = 0;
        for key in 0..4000u32 {
            put(&db, key, 1 + u32::from(key.is_multiple_of(10)));
            if key.is_multiple_of(10) {
                put(&db, key / 2, 3);
            }
            most = most.max(db.log_bytes());
        }
        let stats = db.stats();
        assert!(most <= CAPACITY + 2 * SEGMENT as u64, "fast tier grew to {most}: {stats:?}");
        assert_eq!(stats.evicted_keys, 0, "{stats:?}");
        assert!(stats.demoted_segments >= 40 && stats.ssd_tier_bytes > 5 * CAPACITY, "{stats:?}");
        // The per-tier sums kept as segments come and go match a walk.
        assert_eq!(
            (db.ssd_tier_bytes(), db.log_bytes()),
            (stats.ssd_tier_bytes, stats.log_bytes - stats.ssd_tier_bytes)
        );
        let newest =
            |key: u32| if key < 2000 && key.is_multiple_of(5) { 3 } else { 1 + u32::from(key.is_multiple_of(10)) };
        for key in 0..4000u32 {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap(), Some(value(key, newest(key))), "key {key}");
        }
        assert!(db.stats().ssd_tier_reads > 3000, "{:?}", db.stats());
        for key in 0..100u32 {
            assert_eq!(snapshot.get(&key.to_be_bytes()).unwrap(), Some(value(key, 0)), "snapshot, key {key}");
        }
        drop(snapshot);
        // The fast tier's capacity, the segment being written, one the last
        // checkpoint has yet to free, and on tmpfs those kept for reuse: the
        // moved segments' originals are gone.
        let most = 11 + crate::log::segment::RECYCLE_MAX_SEGMENTS;
        assert!(segment_files(dir.path()) <= most && segment_files(tier.path()) >= 40, "{stats:?}");
        drop(db);
        let db = Db::open(dir.path(), options(tier.path(), 0)).unwrap();
        for key in 0..4000u32 {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap(), Some(value(key, newest(key))), "reopened, key {key}");
        }
        assert_eq!(db.iter().count(), 4000);
        // Bounding the tier at runtime evicts its oldest segments at once.
        db.set_ssd_tier_capacity(CAPACITY).unwrap();
        let bounded = db.stats();
        assert!(bounded.ssd_tier_bytes <= CAPACITY && bounded.evicted_keys > 2000, "{bounded:?}");
        // Every key was read since the reopen: what the tier lets go goes
        // back to the fast tier once, which stays within its capacity too.
        assert!(db.log_bytes() <= CAPACITY + 2 * SEGMENT as u64, "{bounded:?}");
        assert!(db.set_ssd_tier_capacity(CAPACITY - 1).is_err());
        let other = tempfile::tempdir().unwrap();
        let plain = Db::open(other.path(), Options { ssd_tier: None, ..options(tier.path(), 0) }).unwrap();
        assert!(matches!(plain.set_ssd_tier_capacity(0), Err(Error::InvalidOptions(_))));
    }

    /// A bounded tier evicts its oldest segments; entries read while there
    /// are copied back to the head of the log instead (promotion).
    #[test]
    fn a_bounded_tier_evicts_and_promotes_what_is_read() {
        let (dir, tier) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let db = Db::open(dir.path(), options(tier.path(), CAPACITY)).unwrap();
        let most = write_reading_every_20th(&db, 6000, Db::ssd_tier_bytes);
        let stats = db.stats();
        assert!(most <= CAPACITY + 2 * SEGMENT as u64, "SSD tier grew to {most}: {stats:?}");
        assert!(stats.evicted_keys > 3000 && stats.second_chances > 0, "{stats:?}");
        let (hot_kept, cold_kept) = kept_hot_and_cold(&db, 6000);
        // Both tiers hold ~16 segments of ~64 entries: the 300 hot keys and
        // the last ~700 others written.
        assert!(hot_kept >= 285, "hot {hot_kept} of 300, cold {cold_kept} of 5700");
        assert!(cold_kept < 1100, "hot {hot_kept} of 300, cold {cold_kept} of 5700");
    }

    /// A segment of the tier that GC frees is removed, never reused as a
    /// new segment of the log (which is how freed segments on tmpfs are
    /// reused: `buffered` maps the tier's files that way too).
    #[test]
    fn segments_freed_in_the_tier_are_removed_not_reused() {
        let (dir, tier) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let options = Options { durability: crate::Durability::Buffered, ..options(tier.path(), 0) };
        let db = Db::open(dir.path(), options.clone()).unwrap();
        (0..1500).for_each(|key| put(&db, key, 0));
        let demoted = segment_files(tier.path());
        (0..1500).for_each(|key| put(&db, key, 1));
        while db.collect_garbage().unwrap() > 0 {}
        db.inner.checkpoint().unwrap();
        (0..1500).for_each(|key| put(&db, key, 2));
        db.inner.checkpoint().unwrap();
        let segments = db.inner.segments.all();
        for segment in &segments {
            assert_eq!(segment.cold, segment.path().starts_with(tier.path()), "{}", segment.path().display());
        }
        // Those GC freed in the tier are gone with the checkpoint.
        let cold = segments.iter().filter(|s| s.cold).count();
        assert!(db.stats().gc_runs >= demoted as u64 / 2, "{:?}", db.stats());
        assert_eq!(segment_files(tier.path()), cold, "{:?}", db.stats());
        drop(db);
        let db = Db::open(dir.path(), options).unwrap();
        for key in 0..1500u32 {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap(), Some(value(key, 2)), "key {key}");
        }
    }

    /// The directories name each other: a database opened without its tier,
    /// with another, or a tier shared with another database is refused.
    #[test]
    fn open_refuses_a_database_without_its_tier_and_a_shared_tier() {
        let (dir, tier, other) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let db = Db::open(dir.path(), options(tier.path(), 0)).unwrap();
        (0..1500).for_each(|key| put(&db, key, 0));
        assert!(db.stats().demoted_segments > 0);
        drop(db);
        let plain = Options { ssd_tier: None, ..options(tier.path(), 0) };
        let refusals = [
            Db::open(dir.path(), plain).err(),
            Db::open(dir.path(), options(other.path(), 0)).err(),
            Db::open(other.path(), options(tier.path(), 0)).err(),
        ];
        for (refusal, says) in refusals.into_iter().zip(["open it with that tier", ", not ", "is the SSD tier of"]) {
            let error = refusal.expect("refused");
            assert!(matches!(&error, Error::InvalidOptions(m) if m.contains(says)), "{error}");
        }
        let no_capacity = Options { cache_capacity_bytes: 0, ..options(tier.path(), 0) };
        assert!(matches!(Db::open(dir.path(), no_capacity), Err(Error::InvalidOptions(_))));
        let db = Db::open(dir.path(), options(tier.path(), 0)).unwrap();
        assert_eq!(db.get(&7u32.to_be_bytes()).unwrap(), Some(value(7, 0)));
        assert!(db.set_cache_capacity(0).is_err());
    }

    /// A crash between a copy taking its name and the original's removal
    /// leaves the segment in both directories: open keeps the tier's copy.
    /// A half-made copy is removed.
    #[test]
    fn open_keeps_the_tier_copy_of_a_segment_found_twice() {
        let (dir, tier) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let db = Db::open(dir.path(), options(tier.path(), 0)).unwrap();
        (0..1500).for_each(|key| put(&db, key, 0));
        drop(db);
        let (id, demoted) = crate::log::segment::list_segment_files(tier.path()).unwrap()[3].clone();
        let original = dir.path().join(crate::log::segment::segment_file_name(id));
        std::fs::copy(&demoted, &original).unwrap();
        std::fs::write(tier.path().join("demote-00000099.tmp"), b"half a segment").unwrap();
        let db = Db::open(dir.path(), options(tier.path(), 0)).unwrap();
        assert_eq!(db.recovery_report().removed_segments, vec![original.clone()]);
        assert!(!original.exists() && demoted.exists());
        assert!(!tier.path().join("demote-00000099.tmp").exists());
        for key in 0..1500u32 {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap(), Some(value(key, 0)), "key {key}");
        }
    }
}
