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

use smallvec::SmallVec;

/// An owned key.
#[derive(Clone, Default, Eq)]
pub struct Key(SmallVec<[u8; 16]>);

/// A borrowed key: the same bytes with the same order, for lookups.
#[derive(PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct KeyRef([u8]);

impl KeyRef {
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
                compare(&self.0, &other.0)
            }
        }

        impl PartialOrd for $key {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
    )*};
}

ordered_by_compare!(Key, KeyRef);

/// Byte equality through [`compare`]: the derived one calls memcmp, and
/// building the B-tree from a checkpoint compares every neighbouring pair.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && compare(&self.0, &other.0) == Ordering::Equal
    }
}

impl Borrow<KeyRef> for Key {
    fn borrow(&self) -> &KeyRef {
        KeyRef::new(&self.0)
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Key {
    pub fn from_slice(bytes: &[u8]) -> Key {
        Key(SmallVec::from_slice(bytes))
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// Heap bytes the key holds: 0 for keys stored inline (up to 16 bytes).
    pub fn heap_bytes(&self) -> u64 {
        if self.0.spilled() {
            self.0.capacity() as u64
        } else {
            0
        }
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?})", String::from_utf8_lossy(&self.0))
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
