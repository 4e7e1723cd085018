//! Keys and their locations copied out of the index a chunk at a time, for
//! iterators, which must not hold the index's lock while they read values.
//!
//! The keys' bytes lie back to back in one buffer that the next chunk
//! reuses, so a chunk allocates nothing per key once its buffers have
//! grown: as `Key`s, keys over 16 bytes took a heap allocation each (a
//! list's or a hash's member keys are 17-30 bytes; LRANGE of 600 elements
//! spent ~10% of its CPU in malloc and free).

use super::memtable::Loc;

#[derive(Default)]
pub struct KeyChunk {
    bytes: Vec<u8>,
    /// Each entry's key end in `bytes`, and its location.
    entries: Vec<(usize, Loc)>,
    /// The last key the index examined for this chunk, visible or not:
    /// where the next chunk starts.
    last: Vec<u8>,
}

impl KeyChunk {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        self.last.clear();
    }

    pub fn push(&mut self, key: &[u8], loc: Loc) {
        self.bytes.extend_from_slice(key);
        self.entries.push((self.bytes.len(), loc));
    }

    /// Records the last key examined.
    pub fn examined(&mut self, key: &[u8]) {
        self.last.clear();
        self.last.extend_from_slice(key);
    }

    pub fn last_examined(&self) -> &[u8] {
        &self.last
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.entries[i - 1].0 };
        &self.bytes[start..self.entries[i].0]
    }

    pub fn loc(&self, i: usize) -> Option<Loc> {
        self.entries.get(i).map(|&(_, loc)| loc)
    }

    /// The locations from entry `from` on.
    pub fn locs(&self, from: usize) -> impl Iterator<Item = Loc> + '_ {
        self.entries.iter().skip(from).map(|&(_, loc)| loc)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Loc)> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.entries[i].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_back_as_pushed_after_a_clear() {
        let loc = |n: u32| Loc { seg: n, off: n, len: n };
        let mut chunk = KeyChunk::default();
        chunk.push(b"first-key-longer-than-sixteen", loc(1));
        chunk.clear();
        assert_eq!(chunk.len(), 0);
        chunk.push(b"", loc(2));
        chunk.push(b"b", loc(3));
        chunk.push(b"a-key-over-sixteen-bytes", loc(4));
        chunk.examined(b"zz");
        let got: Vec<(Vec<u8>, Loc)> = chunk.iter().map(|(k, l)| (k.to_vec(), l)).collect();
        assert_eq!(
            got,
            vec![(b"".to_vec(), loc(2)), (b"b".to_vec(), loc(3)), (b"a-key-over-sixteen-bytes".to_vec(), loc(4))]
        );
        assert_eq!(chunk.locs(1).collect::<Vec<_>>(), vec![loc(3), loc(4)]);
        assert_eq!(chunk.loc(3), None);
        assert_eq!(chunk.last_examined(), b"zz");
    }
}
