//! Index keys: up to 16 bytes inline, ordered by their bytes, compared
//! 8 bytes at a time as integers.
//!
//! Why a type of its own: a B-tree descent over millions of keys makes ~30
//! comparisons, and comparing byte slices is a call to memcmp each time.
//! Big-endian integer comparisons of 8-byte words give the same answer. Measured on 6M random 16-byte keys in
//! a `BTreeMap`: inserts 15-20% faster, lookups 5-18% (the rest of a lookup
//! is cache misses). Lookups borrow a [`KeyRef`] so they take the same
//! path (a `&[u8]` lookup would fall back to the slice's own ordering).

use std::borrow::Borrow;
use std::cmp::Ordering;

/// Longest key stored inside the `Key` itself.
const INLINE_BYTES: usize = 16;
/// The tag of a key whose bytes are on the heap.
const SPILLED: u8 = u8::MAX;

/// An owned key: up to 16 bytes inline, longer ones on the heap. 17 bytes
/// with alignment 1 (a `SmallVec<[u8; 16]>` took 24 with alignment 8):
/// B-tree leaves keep keys in an array of their own, so every entry of the
/// index shrinks by 7 bytes.
#[repr(C, packed)]
pub struct Key {
    body: Body,
    /// The length of an inline key, or `SPILLED`.
    tag: u8,
}

#[derive(Clone, Copy)]
#[repr(C)]
union Body {
    inline: [u8; INLINE_BYTES],
    heap: Heap,
}

/// A leaked `Box<[u8]>`, owned by its `Key`.
#[derive(Clone, Copy)]
#[repr(C)]
struct Heap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `Key` owns its heap bytes alone (`Clone` copies them), like a
// `Box<[u8]>`, which is `Send` and `Sync`.
unsafe impl Send for Key {}
// SAFETY: as above; `&Key` only reads.
unsafe impl Sync for Key {}

/// A borrowed key: the same bytes with the same order, for lookups.
#[derive(PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct KeyRef([u8]);

impl KeyRef {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn new(bytes: &[u8]) -> &KeyRef {
        // SAFETY: `KeyRef` is `repr(transparent)` over `[u8]`, so the two
        // references have the same layout and the same length metadata.
        unsafe { &*(bytes as *const [u8] as *const KeyRef) }
    }
}

/// Byte order (shorter first on a common prefix), the same as `[u8]`'s,
/// 8 bytes at a time as big-endian integers. Keys often share a prefix
/// ("key:0000…", "user:…"), so stopping at the first 8 bytes would still
/// leave a memcmp call for most comparisons.
pub(crate) fn compare(mut a: &[u8], mut b: &[u8]) -> Ordering {
    while let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a, b) = (&a[8..], &b[8..]);
    }
    // At least one key ends within the next 8 bytes. Zero-padded, the first
    // difference is a real byte difference or the end of the shorter key,
    // which is then a prefix of the other (and a padding 0 sorts it first);
    // no difference means one is a prefix of the other: the shorter first.
    padded(a).cmp(&padded(b)).then(a.len().cmp(&b.len()))
}

/// Up to the first 8 bytes of `bytes`, zero-padded, as a big-endian integer.
pub(crate) fn padded(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(word)
}

/// Orders an owned and a borrowed key the same way, through [`compare`]
/// (a `Borrow` lookup needs both to agree).
macro_rules! ordered_by_compare {
    ($($key:ty),*) => {$(
        impl Ord for $key {
            fn cmp(&self, other: &Self) -> Ordering {
                compare(self.as_bytes(), other.as_bytes())
            }
        }

        impl PartialOrd for $key {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
    )*};
}

ordered_by_compare!(KeyRef);

/// The same order as [`compare`]. Two inline keys compare as one 128-bit
/// integer each, then by length: their bytes are zero-padded, so the
/// first padded difference is the first real one, and a key that is a
/// prefix of the other pads equal and sorts first by length. The merger
/// sorts and inserts by this (11% of a fillseq profile was `Key::cmp`).
impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.inline_word(), other.inline_word()) {
            (Some(a), Some(b)) => a.cmp(&b).then(self.tag.cmp(&other.tag)),
            _ => compare(self.as_slice(), other.as_slice()),
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Byte equality without memcmp: building the B-tree from a checkpoint
/// compares every neighbouring pair.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

impl Borrow<KeyRef> for Key {
    fn borrow(&self) -> &KeyRef {
        KeyRef::new(self.as_slice())
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Key {
    pub fn from_slice(bytes: &[u8]) -> Key {
        if bytes.len() <= INLINE_BYTES {
            let mut inline = [0u8; INLINE_BYTES];
            inline[..bytes.len()].copy_from_slice(bytes);
            return Key { body: Body { inline }, tag: bytes.len() as u8 };
        }
        let len = bytes.len();
        let ptr = Box::into_raw(Box::<[u8]>::from(bytes)).cast::<u8>();
        Key { body: Body { heap: Heap { ptr, len } }, tag: SPILLED }
    }

    /// An inline key's zero-padded bytes as a big-endian integer.
    fn inline_word(&self) -> Option<u128> {
        // SAFETY: the tag says `inline` is the live field; it is plain
        // bytes, copied out of the packed struct.
        (self.tag != SPILLED).then(|| u128::from_be_bytes(unsafe { self.body.inline }))
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.tag == SPILLED {
            // SAFETY: the tag says `heap` is the live field (copied out of
            // the packed struct); it is the `Box<[u8]>` this key owns until
            // drop, so the bytes live as long as `&self`.
            unsafe {
                let heap = self.body.heap;
                std::slice::from_raw_parts(heap.ptr, heap.len)
            }
        } else {
            // SAFETY: `inline` is plain bytes, valid whatever was written;
            // the tag is its length (at most 16). The field has alignment 1,
            // so the reference into the packed struct is aligned.
            unsafe { &self.body.inline[..self.tag as usize] }
        }
    }

    /// Heap bytes the key holds: 0 for keys stored inline (up to 16 bytes).
    pub fn heap_bytes(&self) -> u64 {
        if self.tag == SPILLED {
            self.as_slice().len() as u64
        } else {
            0
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if self.tag == SPILLED {
            // SAFETY: as in `as_slice`; the box is rebuilt once, here.
            unsafe {
                let heap = self.body.heap;
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(heap.ptr, heap.len)));
            }
        }
    }
}

impl Clone for Key {
    fn clone(&self) -> Key {
        Key::from_slice(self.as_slice())
    }
}

impl Default for Key {
    fn default() -> Key {
        Key::from_slice(&[])
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?})", String::from_utf8_lossy(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn compare_is_byte_order(
            a in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 255]), 0..20),
            b in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 255]), 0..20),
        ) {
            proptest::prop_assert_eq!(compare(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(compare(&a, &a), std::cmp::Ordering::Equal);
        }
    }

    proptest::proptest! {
        #[test]
        fn keys_inline_and_spilled_keep_their_bytes_and_order(
            a in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 255]), 0..40),
            b in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 255]), 0..40),
        ) {
            let (ka, kb) = (Key::from_slice(&a), Key::from_slice(&b));
            proptest::prop_assert_eq!(ka.as_slice(), &a[..]);
            let copy = ka.clone();
            proptest::prop_assert_eq!(copy.as_slice(), &a[..]);
            proptest::prop_assert_eq!(ka.heap_bytes(), if a.len() > 16 { a.len() as u64 } else { 0 });
            proptest::prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            proptest::prop_assert_eq!(ka == kb, a == b);
            proptest::prop_assert_eq!(KeyRef::new(&a).cmp(kb.borrow()), a.cmp(&b));
        }
    }

    #[test]
    fn a_key_takes_17_bytes_with_alignment_1() {
        assert_eq!((std::mem::size_of::<Key>(), std::mem::align_of::<Key>()), (17, 1));
        assert_eq!(Key::default().as_slice(), b"");
        // Spilled keys in a map: inserted, cloned, removed and dropped.
        let mut map = std::collections::BTreeMap::new();
        for i in 0..1000u32 {
            let key = Key::from_slice(format!("a-key-long-enough-to-spill-{i:05}").as_bytes());
            map.insert(key.clone(), i);
            map.insert(Key::from_slice(&i.to_be_bytes()), i);
        }
        assert_eq!(map.len(), 2000);
        assert_eq!(map.get(KeyRef::new(b"a-key-long-enough-to-spill-00042")), Some(&42));
        map.retain(|_, v| *v % 2 == 0);
        assert_eq!(map.len(), 1000);
    }

    #[test]
    fn order_is_byte_order() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\0",
            b"a",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
            b"b",
            b"\xff\xff",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(Key::from_slice(a).cmp(&Key::from_slice(b)), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(KeyRef::new(a).cmp(KeyRef::new(b)), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(Key::from_slice(a) == Key::from_slice(b), a == b, "{a:?} vs {b:?}");
            }
        }
    }
}
