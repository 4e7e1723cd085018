//! An atomic group of puts and deletes: after a crash either all of a
//! batch is there or none of it.

use crate::error::Error;
use crate::log::record::{decode_entry, encode_entry, encode_entry_parts, EntryKind};
use crate::options::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Entries are encoded (CRC included) as they are added, on the caller's
/// thread, so the group-commit leader only copies bytes.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let db = scaledkv::Db::open(dir.path(), scaledkv::Options::default()).unwrap();
/// let mut batch = scaledkv::WriteBatch::new();
/// batch.put(b"apple", b"red");
/// batch.put(b"banana", b"yellow");
/// batch.delete(b"cherry");
/// db.write(batch).unwrap();
/// assert_eq!(db.get(b"banana").unwrap().as_deref(), Some(&b"yellow"[..]));
/// ```
/// One entry of a batch: its key, and its value and expiry time (None for
/// a delete).
pub type BatchEntry<'a> = (&'a [u8], Option<(&'a [u8], Option<u64>)>);

/// Where a batch stood (`WriteBatch::save_point`).
#[derive(Clone, Copy, Debug)]
pub struct SavePoint {
    bytes: usize,
    count: u32,
    /// No limit violation had been found.
    valid: bool,
}

#[derive(Debug, Default)]
pub struct WriteBatch {
    pub(crate) body: Vec<u8>,
    pub(crate) count: u32,
    /// The first limit violation; `Db::write` returns it.
    pub(crate) invalid: Option<Error>,
    /// What the caller attached (`set_note`), for the commit observer.
    pub(crate) note: Option<Vec<u8>>,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn with_capacity(bytes: usize) -> WriteBatch {
        WriteBatch { body: Vec::with_capacity(bytes), ..WriteBatch::default() }
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.add(EntryKind::Put, key, value, None);
    }

    /// A put that becomes invisible at `expiry_ms` (ms since the Unix epoch).
    pub fn put_with_expiry(&mut self, key: &[u8], value: &[u8], expiry_ms: u64) {
        self.add(EntryKind::Put, key, value, Some(expiry_ms));
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.add(EntryKind::Delete, key, b"", None);
    }

    /// A put whose value is the concatenation of `parts`, with an optional
    /// expiry time: a caller that frames values (a type byte, a header)
    /// need not build the whole value first.
    pub fn put_parts(&mut self, key: &[u8], parts: &[&[u8]], expiry_ms: Option<u64>) {
        if self.invalid.is_some() {
            return;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if let Some(error) = check_sizes(key.len(), len) {
            self.invalid = Some(error);
        } else {
            encode_entry_parts(&mut self.body, EntryKind::Put, key, parts, expiry_ms);
            self.count += 1;
        }
    }

    /// Moves every entry of `other` to the end of this batch, in order: a
    /// caller that builds a piece it may still drop (a command that can
    /// fail half-way) appends it once it succeeded.
    pub fn append(&mut self, other: &mut WriteBatch) {
        if self.invalid.is_none() {
            self.invalid = other.invalid.take();
        }
        if self.body.is_empty() {
            // Nothing to keep in front: take the other's bytes, uncopied.
            std::mem::swap(&mut self.body, &mut other.body);
        } else {
            self.body.append(&mut other.body);
        }
        self.count += other.count;
        if let Some(theirs) = other.note.take() {
            self.note.get_or_insert_with(Vec::new).extend_from_slice(&theirs);
        }
        other.clear();
    }

    /// Attaches `note` to the batch: not written to the log, but handed
    /// to the database's commit observer (`Db::set_commit_observer`) with
    /// the batch's sequence number once it is durable, before any reader
    /// can see it. A server that streams its writes to replicas notes the
    /// keys a batch changed this way, in commit order. Appending a batch
    /// (`append`) appends its note.
    pub fn set_note(&mut self, note: Vec<u8>) {
        self.note = Some(note);
    }

    /// Where the batch stands now, to take back what is added after it
    /// (`rollback_to`), as RocksDB's `WriteBatch::SetSavePoint`: a caller
    /// whose command fails half-way drops its entries without having built
    /// them apart.
    pub fn save_point(&self) -> SavePoint {
        SavePoint { bytes: self.body.len(), count: self.count, valid: self.invalid.is_none() }
    }

    /// Drops every entry added since `point` (taken from this batch, with
    /// nothing dropped since), and a limit violation found since.
    pub fn rollback_to(&mut self, point: SavePoint) {
        debug_assert!(point.bytes <= self.body.len() && point.count <= self.count, "a save point of this batch");
        self.body.truncate(point.bytes);
        self.count = point.count;
        if point.valid {
            self.invalid = None;
        }
    }

    /// The key of the entry that starts at `offset` (as for `value_at`).
    pub fn key_at(&self, offset: usize) -> Option<&[u8]> {
        Some(decode_entry(self.body.get(offset..)?, false).ok()?.key)
    }

    /// The value and expiry time of the put that starts at `offset` (the
    /// `size_bytes()` taken just before it was added), None for a delete:
    /// a caller reads back what it wrote before the batch commits, with no
    /// copy kept beside the batch.
    pub fn value_at(&self, offset: usize) -> Option<(&[u8], Option<u64>)> {
        let entry = decode_entry(self.body.get(offset..)?, false).ok()?;
        (entry.kind == EntryKind::Put).then_some((entry.value, entry.expiry_ms))
    }

    /// Every entry in the order added.
    pub fn entries(&self) -> impl Iterator<Item = BatchEntry<'_>> + '_ {
        let mut at = 0;
        (0..self.count).map_while(move |_| {
            let entry = decode_entry(self.body.get(at..)?, false).ok()?;
            at += entry.len;
            Some((entry.key, (entry.kind == EntryKind::Put).then_some((entry.value, entry.expiry_ms))))
        })
    }

    /// Keeps the entries for which `keep(key, offset)` holds, in order
    /// (`offset`: where the entry starts now, as `value_at` takes it). A
    /// caller that wrote a key several times drops all but the last: the
    /// batch is applied whole, so nothing can see the others.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], usize) -> bool) {
        self.keep_where(|key, at, _| keep(key, at));
    }

    /// Keeps only the last of each run of consecutive entries for one key
    /// (a pipeline of SETs to one key), for the same reason.
    pub fn drop_repeats(&mut self) {
        self.keep_where(|key, _, next| next != Some(key));
    }

    /// Moves the entries whose key `take` picks out of this batch, in
    /// order, into batches of at most `chunk_bytes` each (an entry bigger
    /// than that alone in one); the others stay, in order. For a caller
    /// that may write the moved entries first, in batches of their own:
    /// entries nothing can reach until the rest is written (the fields of
    /// a collection its key will point to).
    pub fn split_off(&mut self, mut take: impl FnMut(&[u8]) -> bool, chunk_bytes: usize) -> Vec<WriteBatch> {
        let old = std::mem::take(&mut self.body);
        let mut kept = Vec::with_capacity(old.len());
        let (mut count, mut at) = (0, 0);
        let mut chunks: Vec<WriteBatch> = Vec::new();
        while let Some(entry) = old.get(at..).and_then(|rest| decode_entry(rest, false).ok()) {
            let bytes = &old[at..at + entry.len];
            if take(entry.key) {
                if chunks.last().is_none_or(|chunk| chunk.body.len() + bytes.len() > chunk_bytes) {
                    chunks.push(WriteBatch::default());
                }
                let chunk = chunks.last_mut().expect("one pushed");
                chunk.body.extend_from_slice(bytes);
                chunk.count += 1;
            } else {
                kept.extend_from_slice(bytes);
                count += 1;
            }
            at += entry.len;
        }
        self.body = kept;
        self.count = count;
        chunks
    }

    /// Keeps the entries for which `keep(key, offset, next entry's key)`
    /// holds, in order.
    fn keep_where(&mut self, mut keep: impl FnMut(&[u8], usize, Option<&[u8]>) -> bool) {
        let mut body = Vec::with_capacity(self.body.len());
        let mut count = 0;
        let mut at = 0;
        let decode = |at: usize| (at < self.body.len()).then(|| decode_entry(&self.body[at..], false).ok()).flatten();
        let mut entry = decode(0);
        while let Some(current) = entry {
            let next_at = at + current.len;
            entry = decode(next_at);
            if keep(current.key, at, entry.as_ref().map(|next| next.key)) {
                body.extend_from_slice(&self.body[at..next_at]);
                count += 1;
            }
            at = next_at;
        }
        self.body = body;
        self.count = count;
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.body.len()
    }

    pub fn clear(&mut self) {
        self.body.clear();
        self.count = 0;
        self.invalid = None;
        self.note = None;
    }

    fn add(&mut self, kind: EntryKind, key: &[u8], value: &[u8], expiry_ms: Option<u64>) {
        if self.invalid.is_some() {
            return;
        }
        if let Some(error) = check_sizes(key.len(), value.len()) {
            self.invalid = Some(error);
        } else {
            encode_entry(&mut self.body, kind, key, value, expiry_ms);
            self.count += 1;
        }
    }
}

pub(crate) fn check_sizes(key: usize, value: usize) -> Option<Error> {
    if key > MAX_KEY_BYTES {
        Some(Error::KeyTooLarge { len: key, max: MAX_KEY_BYTES })
    } else if value > MAX_VALUE_BYTES {
        Some(Error::ValueTooLarge { len: value, max: MAX_VALUE_BYTES })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_to_a_save_point_drops_what_came_after_it() {
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1");
        let point = batch.save_point();
        let at = batch.size_bytes();
        batch.put(b"b", b"2");
        assert_eq!(batch.key_at(at), Some(&b"b"[..]));
        batch.put(&vec![0; MAX_KEY_BYTES + 1], b"too long a key");
        assert!(batch.invalid.is_some());
        batch.rollback_to(point);
        assert!(batch.invalid.is_none(), "the violation came after the point");
        batch.put(b"c", b"3");
        let entries: Vec<_> = batch.entries().map(|(key, value)| (key.to_vec(), value.map(|v| v.0.to_vec()))).collect();
        assert_eq!(entries, [(b"a".to_vec(), Some(b"1".to_vec())), (b"c".to_vec(), Some(b"3".to_vec()))]);

        batch.put(&vec![0; MAX_KEY_BYTES + 1], b"");
        let point = batch.save_point();
        batch.put(b"d", b"4");
        batch.rollback_to(point);
        assert!(batch.invalid.is_some(), "a violation before the point stays");
    }

    #[test]
    fn retain_keeps_the_chosen_entries_in_order_and_they_commit() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::Db::open(dir.path(), crate::Options::default()).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1");
        batch.put(b"b", b"1");
        let last_a = batch.size_bytes();
        batch.put_with_expiry(b"a", b"2", u64::MAX);
        batch.delete(b"c");
        let mut offsets = Vec::new();
        batch.retain(|key, at| {
            offsets.push(at);
            key != b"a" || at == last_a
        });
        assert_eq!(offsets.len(), 4, "every entry offered once");
        let entries: Vec<_> = batch.entries().collect();
        assert_eq!(entries, [(&b"b"[..], Some((&b"1"[..], None))), (b"a", Some((b"2", Some(u64::MAX)))), (b"c", None)]);
        assert_eq!(batch.len(), 3);
        db.write(batch).unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn drop_repeats_keeps_the_last_of_each_run_of_one_key() {
        let mut batch = WriteBatch::new();
        for (key, value) in [("a", "1"), ("a", "2"), ("b", "1"), ("a", "3"), ("a", "4"), ("a", "5")] {
            batch.put(key.as_bytes(), value.as_bytes());
        }
        batch.delete(b"c");
        batch.put(b"c", b"1");
        batch.drop_repeats();
        let entries: Vec<_> = batch.entries().collect();
        let put = |key: &'static [u8], value: &'static [u8]| (key, Some((value, None)));
        assert_eq!(entries, [put(b"a", b"2"), put(b"b", b"1"), put(b"a", b"5"), put(b"c", b"1")]);
        assert_eq!(batch.len(), 4);
        let mut single = WriteBatch::new();
        single.put(b"x", b"1");
        single.drop_repeats();
        assert_eq!(single.entries().collect::<Vec<_>>(), [put(b"x", b"1")]);
    }

    #[test]
    fn split_off_moves_the_chosen_entries_into_bounded_batches_in_order() {
        let mut batch = WriteBatch::new();
        for i in 0..10u8 {
            batch.put(&[b'f', i], &[i; 100]);
            batch.put(&[b'k', i], b"v");
        }
        batch.delete(&[b'f', 3]);
        batch.put_with_expiry(b"fat", &[7; 1000], 9);
        type Owned = (Vec<u8>, Option<(Vec<u8>, Option<u64>)>);
        let owned = |(key, value): BatchEntry<'_>| -> Owned { (key.to_vec(), value.map(|(v, e)| (v.to_vec(), e))) };
        let (moved_before, kept_before): (Vec<Owned>, Vec<Owned>) =
            batch.entries().map(owned).partition(|(key, _)| key[0] == b'f');
        let chunks = batch.split_off(|key| key[0] == b'f', 400);
        assert_eq!(batch.entries().map(owned).collect::<Vec<_>>(), kept_before);
        assert_eq!(batch.len(), 10);
        let moved: Vec<Owned> = chunks.iter().flat_map(|chunk| chunk.entries().map(owned)).collect();
        assert_eq!(moved, moved_before);
        // Each chunk within the bound but the one whose entry alone passes it.
        assert!(chunks.len() > 3, "{}", chunks.len());
        for chunk in &chunks {
            assert!(chunk.size_bytes() <= 400 || chunk.len() == 1, "{} bytes", chunk.size_bytes());
            assert_eq!(chunk.entries().count(), chunk.len());
        }
        assert!(WriteBatch::new().split_off(|_| true, 10).is_empty());
    }

    #[test]
    fn an_appended_batch_commits_with_the_first_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::Db::open(dir.path(), crate::Options::default()).unwrap();
        let mut first = WriteBatch::new();
        first.put(b"a", b"1");
        first.put(b"b", b"1");
        let mut second = WriteBatch::new();
        second.delete(b"a");
        second.put(b"b", b"2");
        second.put(b"c", b"2");
        let appended_at = first.size_bytes();
        first.append(&mut second);
        assert_eq!((first.len(), second.len(), second.size_bytes()), (5, 0, 0));
        // Read back by offset: the first put, the appended delete and put.
        assert_eq!(first.value_at(0), Some((&b"1"[..], None)));
        assert_eq!(first.value_at(appended_at), None);
        let next = appended_at + crate::log::record::entry_len(1, 0, false);
        assert_eq!(first.value_at(next), Some((&b"2"[..], None)));
        assert_eq!(first.value_at(first.size_bytes()), None);
        let entries: Vec<_> = first.entries().collect();
        assert_eq!(
            entries,
            [
                (&b"a"[..], Some((&b"1"[..], None))),
                (b"b", Some((b"1", None))),
                (b"a", None),
                (b"b", Some((b"2", None))),
                (b"c", Some((b"2", None)))
            ]
        );
        db.write(first).unwrap();
        assert_eq!(db.get(b"a").unwrap(), None);
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(db.get(b"c").unwrap().as_deref(), Some(&b"2"[..]));
        // A limit violation travels with the entries.
        let mut bad = WriteBatch::new();
        bad.put(&vec![0; MAX_KEY_BYTES + 1], b"v");
        let mut batch = WriteBatch::new();
        batch.append(&mut bad);
        assert!(db.write(batch).is_err());
    }
}
