//! The rank-block fences of big sorted sets that a command's writes split
//! off or dropped (`Writes::note_fence`), in order, and folded per table
//! for the lookups a command makes per member while they are pending: a
//! ZADD of 300,000 members refolded every edit of its piece for each
//! member (14% of its time).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Bound;

/// A rank block of the big sorted set `table` that a write added (split
/// off at `fence`) or dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct FenceEdit {
    pub table: u64,
    pub fence: Vec<u8>,
    pub added: bool,
}

/// One table's edits folded: the fences added (and not dropped since) and
/// those dropped (and not added since).
#[derive(Debug, Default)]
pub struct FenceChanges {
    added: BTreeSet<Vec<u8>>,
    dropped: HashSet<Vec<u8>>,
}

impl FenceChanges {
    fn apply(&mut self, edit: &FenceEdit) {
        if edit.added {
            self.dropped.remove(&edit.fence);
            self.added.insert(edit.fence.clone());
        } else {
            self.added.remove(&edit.fence);
            self.dropped.insert(edit.fence.clone());
        }
    }

    /// Whether these changes added the table's first, empty fence (a table
    /// these writes made).
    pub fn added_first(&self) -> bool {
        self.added.contains(&[][..])
    }

    /// The last fence at or before `place` of the blocks these changes
    /// leave of `fences` (committed, in order; the first, empty, is never
    /// dropped).
    pub fn fence_of(&self, fences: &[Vec<u8>], place: &[u8]) -> Vec<u8> {
        let before = fences.partition_point(|fence| fence.as_slice() <= place);
        let committed = fences[..before].iter().rev().find(|fence| !self.dropped.contains(*fence));
        let new = self.added.range::<[u8], _>((Bound::Unbounded, Bound::Included(place))).next_back();
        match (committed, new) {
            (Some(committed), Some(new)) if new > committed => new.clone(),
            (Some(committed), _) => committed.clone(),
            (None, new) => new.cloned().unwrap_or_default(),
        }
    }

    /// The first fence after `fence` of the blocks these changes leave of
    /// `fences`: where `fence`'s block ends (None: the last block).
    pub fn next_fence(&self, fences: &[Vec<u8>], fence: &[u8]) -> Option<Vec<u8>> {
        let after = fences.partition_point(|committed| committed.as_slice() <= fence);
        let committed = fences[after..].iter().find(|committed| !self.dropped.contains(*committed));
        let new = self.added.range::<[u8], _>((Bound::Excluded(fence), Bound::Unbounded)).next();
        match (committed, new) {
            (Some(committed), Some(new)) => Some(committed.min(new).clone()),
            (committed, new) => committed.or(new).cloned(),
        }
    }
}

/// The edits in order, with their fold per table built on the first
/// lookup and kept up to date by `push`; anything else that changes the
/// edits (a rollback, a branch's merge, a commit) drops the fold.
#[derive(Debug, Default)]
pub struct FenceEdits {
    list: Vec<FenceEdit>,
    folded: RefCell<Option<HashMap<u64, FenceChanges>>>,
}

impl FenceEdits {
    pub fn push(&mut self, edit: FenceEdit) {
        if let Some(folded) = self.folded.get_mut() {
            folded.entry(edit.table).or_default().apply(&edit);
        }
        self.list.push(edit);
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn truncate(&mut self, len: usize) {
        if len < self.list.len() {
            self.list.truncate(len);
            *self.folded.get_mut() = None;
        }
    }

    pub fn append(&mut self, other: &mut FenceEdits) {
        if !other.is_empty() {
            self.list.append(&mut other.take());
            *self.folded.get_mut() = None;
        }
    }

    /// The edits, in order, leaving none.
    pub fn take(&mut self) -> Vec<FenceEdit> {
        *self.folded.get_mut() = None;
        std::mem::take(&mut self.list)
    }

    /// `look` at table `table`'s changes.
    pub fn changes<R>(&self, table: u64, look: impl FnOnce(&FenceChanges) -> R) -> R {
        let mut folded = self.folded.borrow_mut();
        let folded = folded.get_or_insert_with(|| {
            let mut folded: HashMap<u64, FenceChanges> = HashMap::new();
            for edit in &self.list {
                folded.entry(edit.table).or_default().apply(edit);
            }
            folded
        });
        match folded.get(&table) {
            Some(changes) => look(changes),
            None => look(&FenceChanges::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edits(list: &[(u64, &[u8], bool)]) -> FenceEdits {
        let mut edits = FenceEdits::default();
        for &(table, fence, added) in list {
            edits.push(FenceEdit { table, fence: fence.to_vec(), added });
        }
        edits
    }

    fn text(fence: Vec<u8>) -> String {
        String::from_utf8(fence).unwrap()
    }

    #[test]
    fn a_fence_is_found_among_committed_fences_and_these_writes_edits() {
        let fences: Vec<Vec<u8>> = [&b""[..], b"c", b"m"].iter().map(|f| f.to_vec()).collect();
        let list: [(u64, &[u8], bool); 5] =
            [(7, b"f", true), (7, b"m", false), (7, b"q", true), (7, b"x", true), (7, b"x", false)];
        let ours = edits(&list);
        let find = |edits: &FenceEdits, fences: &[Vec<u8>], place: &[u8]| {
            text(edits.changes(7, |c| c.fence_of(fences, place)))
        };
        assert_eq!(find(&ours, &fences, b"a"), "");
        assert_eq!(find(&ours, &fences, b"c"), "c");
        assert_eq!(find(&edits(&[(8, b"e", true)]), &fences, b"e"), "c", "another table's edit");
        assert_eq!(find(&ours, &fences, b"g"), "f", "added");
        assert_eq!(find(&ours, &fences, b"p"), "f", "m dropped");
        assert_eq!(find(&ours, &fences, b"z"), "q", "x added, then dropped");
        assert_eq!(find(&FenceEdits::default(), &fences, b"p"), "m");
        // A new table: nothing committed, every fence an edit.
        let new = edits(&[(7, b"", true), (7, b"k", true)]);
        assert!(new.changes(7, FenceChanges::added_first));
        assert_eq!(find(&new, &[], b"j"), "");
        assert_eq!(find(&new, &[], b"k"), "k");

        let next = |edits: &FenceEdits, fence: &[u8]| edits.changes(7, |c| c.next_fence(&fences, fence)).map(text);
        assert_eq!(next(&ours, b""), Some("c".into()));
        assert_eq!(next(&ours, b"c"), Some("f".into()), "added before a committed one");
        assert_eq!(next(&ours, b"f"), Some("q".into()), "m dropped");
        assert_eq!(next(&ours, b"q"), None, "x added, then dropped");
        assert_eq!(next(&FenceEdits::default(), b"c"), Some("m".into()));
        assert_eq!(next(&FenceEdits::default(), b"m"), None);
    }

    /// The fold follows every change to the edits: pushed after it was
    /// built, rolled back, merged from a branch, taken.
    #[test]
    fn the_fold_follows_the_edits() {
        let fences = vec![Vec::new()];
        let mut ours = edits(&[(7, b"f", true)]);
        let find = |edits: &FenceEdits, place: &[u8]| text(edits.changes(7, |c| c.fence_of(&fences, place)));
        assert_eq!(find(&ours, b"g"), "f");
        ours.push(FenceEdit { table: 7, fence: b"g".to_vec(), added: true });
        assert_eq!(find(&ours, b"h"), "g", "pushed after the fold");
        ours.truncate(1);
        assert_eq!(find(&ours, b"h"), "f", "rolled back");
        ours.append(&mut edits(&[(7, b"f", false)]));
        assert_eq!(find(&ours, b"h"), "", "a branch dropped it");
        assert_eq!(ours.len(), 2);
        assert_eq!(ours.take().len(), 2);
        assert_eq!(find(&ours, b"h"), "");
        ours.push(FenceEdit { table: 7, fence: b"a".to_vec(), added: true });
        assert_eq!(find(&ours, b"h"), "a", "the fold starts over after a take");
    }
}
