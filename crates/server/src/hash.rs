//! A Redis hash as one engine value: every field and its value, in the
//! order the fields were added, as Redis keeps a small hash (a listpack).
//!
//! Layout after the keyspace's type byte: the field count (u32, little
//! endian), then per field its length (LEB128), its bytes, the value's
//! length (LEB128) and its bytes. A write reads the whole value and writes
//! it back whole, so a command costs O(size of the hash), as Redis's
//! listpack does; like a listpack it holds at most 512 fields of up to 64
//! bytes, and a bigger hash becomes a table with an engine entry per field
//! (`commands::table`).

use std::borrow::Cow;
use std::collections::HashMap;

/// The value of a hash is not in the layout above (it never is unless the
/// log returned wrong bytes, which its checksums rule out).
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt;

const COUNT_BYTES: usize = 4;
/// Set in the count's header once the hash has passed Redis's listpack
/// limits (512 fields, a field or value over 64 bytes): Redis then keeps
/// it as a hash table for good, and OBJECT ENCODING says so.
const HASHTABLE_BIT: u32 = 1 << 31;

/// Redis's defaults for `hash-max-listpack-entries` and `-value`.
pub const LISTPACK_ENTRIES: usize = 512;
pub const LISTPACK_VALUE: usize = 64;

fn header(data: &[u8]) -> Result<u32, Corrupt> {
    let header: [u8; COUNT_BYTES] = data.get(..COUNT_BYTES).ok_or(Corrupt)?.try_into().map_err(|_| Corrupt)?;
    Ok(u32::from_le_bytes(header))
}

/// Whether Redis would keep this hash as a hash table (it has passed the
/// listpack limits at some point).
pub fn is_hashtable(data: &[u8]) -> Result<bool, Corrupt> {
    Ok(header(data)? & HASHTABLE_BIT != 0)
}

/// Above this many fields a lookup goes through a hash map instead of a
/// scan (built once per command that changes several fields).
const INDEX_FROM: usize = 16;

/// The number of fields, from the header alone.
pub fn count(data: &[u8]) -> Result<usize, Corrupt> {
    Ok((header(data)? & !HASHTABLE_BIT) as usize)
}

/// The (field, value) pairs of an encoded hash, in order.
pub fn pairs(data: &[u8]) -> Pairs<'_> {
    Pairs {
        rest: data.get(COUNT_BYTES..).unwrap_or_default(),
        left: count(data).unwrap_or(0),
        failed: data.len() < COUNT_BYTES,
    }
}

pub struct Pairs<'a> {
    rest: &'a [u8],
    left: usize,
    failed: bool,
}

impl<'a> Pairs<'a> {
    fn bytes(&mut self) -> Result<&'a [u8], Corrupt> {
        // Lengths under 128 (most) are one byte.
        if let Some(&len) = self.rest.first().filter(|&&byte| byte < 0x80) {
            let bytes = self.rest.get(1..1 + len as usize).ok_or(Corrupt)?;
            self.rest = &self.rest[1 + len as usize..];
            return Ok(bytes);
        }
        let mut len: u64 = 0;
        for (i, &byte) in self.rest.iter().enumerate().take(10) {
            len |= ((byte & 0x7f) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                let start = i + 1;
                let end = start.checked_add(usize::try_from(len).map_err(|_| Corrupt)?).ok_or(Corrupt)?;
                let bytes = self.rest.get(start..end).ok_or(Corrupt)?;
                self.rest = &self.rest[end..];
                return Ok(bytes);
            }
        }
        Err(Corrupt)
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            self.failed = false;
            self.left = 0;
            return Some(Err(Corrupt));
        }
        if self.left == 0 {
            return (!self.rest.is_empty()).then(|| {
                self.rest = &[];
                Err(Corrupt)
            });
        }
        self.left -= 1;
        let pair = self.bytes().and_then(|field| Ok((field, self.bytes()?)));
        if pair.is_err() {
            self.left = 0;
            self.rest = &[];
        }
        Some(pair)
    }
}

/// The value of `field`, found by a scan that allocates nothing.
pub fn get<'a>(data: &'a [u8], field: &[u8]) -> Result<Option<&'a [u8]>, Corrupt> {
    for pair in pairs(data) {
        let (name, value) = pair?;
        if name == field {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// A field and its value, None once removed.
type Entry<'a> = (&'a [u8], Option<Cow<'a, [u8]>>);

/// A hash decoded for a change: fields borrowed from the stored value or
/// from the command's arguments, values replaced in place (a changed
/// field keeps its position, as in Redis's listpack) and removed ones left
/// as holes until `encode`.
#[derive(Default)]
pub struct Fields<'a> {
    entries: Vec<Entry<'a>>,
    live: usize,
    /// Field → position in `entries`, once there are many.
    index: Option<HashMap<&'a [u8], usize>>,
    /// Past Redis's listpack limits, now or before (`is_hashtable`).
    pub hashtable: bool,
}

impl<'a> Fields<'a> {
    pub fn decode(data: &'a [u8]) -> Result<Fields<'a>, Corrupt> {
        let mut fields = Fields {
            entries: Vec::with_capacity(count(data)?.min(data.len())),
            hashtable: is_hashtable(data)?,
            ..Fields::default()
        };
        for pair in pairs(data) {
            let (field, value) = pair?;
            fields.entries.push((field, Some(Cow::Borrowed(value))));
        }
        fields.live = fields.entries.len();
        if fields.live > INDEX_FROM {
            fields.index = Some(fields.entries.iter().enumerate().map(|(i, (field, _))| (*field, i)).collect());
            if fields.index.as_ref().map(HashMap::len) != Some(fields.live) {
                return Err(Corrupt); // a field twice
            }
        }
        Ok(fields)
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn position(&self, field: &[u8]) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(field).copied(),
            None => self.entries.iter().position(|(name, value)| *name == field && value.is_some()),
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.entries[self.position(field)?].1.as_deref()
    }

    /// Sets `field`; true if it is new.
    pub fn set(&mut self, field: &'a [u8], value: Cow<'a, [u8]>) -> bool {
        self.hashtable |= field.len() > LISTPACK_VALUE || value.len() > LISTPACK_VALUE;
        if let Some(at) = self.position(field) {
            self.entries[at].1 = Some(value);
            return false;
        }
        if let Some(index) = &mut self.index {
            index.insert(field, self.entries.len());
        }
        self.entries.push((field, Some(value)));
        self.live += 1;
        self.hashtable |= self.live > LISTPACK_ENTRIES;
        if self.index.is_none() && self.live > INDEX_FROM {
            self.index = Some(
                self.entries.iter().enumerate().filter(|(_, (_, v))| v.is_some()).map(|(i, (f, _))| (*f, i)).collect(),
            );
        }
        true
    }

    /// Removes `field`; true if it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let Some(at) = self.position(field) else { return false };
        self.entries[at].1 = None;
        if let Some(index) = &mut self.index {
            index.remove(field);
        }
        self.live -= 1;
        true
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries.iter().filter_map(|(field, value)| Some((*field, value.as_deref()?)))
    }

    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self.iter().map(|(f, v)| f.len() + v.len() + 4).sum();
        let mut out = Vec::with_capacity(COUNT_BYTES + size);
        encode_into(&mut out, self.live, self.hashtable, self.iter());
        out
    }
}

/// Appends the encoding of `count` pairs to `out`.
pub fn encode_into<'p>(
    out: &mut Vec<u8>,
    count: usize,
    hashtable: bool,
    pairs: impl Iterator<Item = (&'p [u8], &'p [u8])>,
) {
    let flag = if hashtable { HASHTABLE_BIT } else { 0 };
    out.extend_from_slice(&(count as u32 | flag).to_le_bytes());
    for (field, value) in pairs {
        for bytes in [field, value] {
            let mut len = bytes.len() as u64;
            while len >= 0x80 {
                out.push(len as u8 | 0x80);
                len >>= 7;
            }
            out.push(len as u8);
            out.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encoded(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into(&mut out, pairs.len(), false, pairs.iter().copied());
        out
    }

    #[test]
    fn changes_keep_the_order_of_insertion() {
        let data = encoded(&[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
        let mut fields = Fields::decode(&data).unwrap();
        assert!(!fields.set(b"b", Cow::Borrowed(b"two")));
        assert!(fields.remove(b"a"));
        assert!(!fields.remove(b"a"));
        assert!(fields.set(b"a", Cow::Borrowed(b"one")));
        assert!(fields.set(b"d", Cow::Borrowed(b"")));
        let after = fields.encode();
        let listed: Vec<_> = pairs(&after).map(Result::unwrap).collect();
        let expected: Vec<(&[u8], &[u8])> = vec![(b"b", b"two"), (b"c", b"3"), (b"a", b"one"), (b"d", b"")];
        assert_eq!(listed, expected);
        assert_eq!(count(&after), Ok(4));
        assert_eq!(get(&after, b"c"), Ok(Some(&b"3"[..])));
        assert_eq!(get(&after, b"x"), Ok(None));
    }

    #[test]
    fn passing_the_listpack_limits_is_remembered() {
        let mut data = encoded(&[(b"a", b"1")]);
        assert_eq!(is_hashtable(&data), Ok(false));
        let long = [b'v'; LISTPACK_VALUE + 1];
        for value in [&long[..], b"short"] {
            let mut fields = Fields::decode(&data).unwrap();
            fields.set(b"a", Cow::Borrowed(value));
            data = fields.encode();
            // Redis keeps a hash table once it made one.
            assert_eq!((is_hashtable(&data), count(&data)), (Ok(true), Ok(1)));
        }
        let names: Vec<Vec<u8>> = (0..=LISTPACK_ENTRIES).map(|i| i.to_string().into_bytes()).collect();
        let mut fields = Fields::default();
        for name in &names[..LISTPACK_ENTRIES] {
            fields.set(name, Cow::Borrowed(b"v"));
        }
        assert!(!fields.hashtable);
        fields.set(&names[LISTPACK_ENTRIES], Cow::Borrowed(b"v"));
        assert!(fields.hashtable);
        let data = fields.encode();
        assert_eq!((is_hashtable(&data), count(&data)), (Ok(true), Ok(LISTPACK_ENTRIES + 1)));
        assert_eq!(pairs(&data).count(), LISTPACK_ENTRIES + 1);
    }

    #[test]
    fn long_lengths_take_several_bytes() {
        let big = vec![7u8; 300_000];
        let data = encoded(&[(b"f", &big), (&big[..200], b"v")]);
        let listed: Vec<_> = pairs(&data).map(Result::unwrap).collect();
        assert_eq!(listed, vec![(&b"f"[..], &big[..]), (&big[..200], &b"v"[..])]);
    }

    #[test]
    fn every_cut_and_a_wrong_count_are_corrupt() {
        let data = encoded(&[(b"field", b"value"), (b"g", &[0x80; 200])]);
        for cut in 0..data.len() {
            assert!(pairs(&data[..cut]).any(|p| p.is_err()), "cut at {cut}");
            assert!(Fields::decode(&data[..cut]).is_err(), "cut at {cut}");
        }
        let mut more = data.clone();
        more[0] = 3;
        assert!(Fields::decode(&more).is_err());
        let mut fewer = data;
        fewer[0] = 1;
        assert!(Fields::decode(&fewer).is_err());
    }

    proptest! {
        /// A model check: random sets and removes, with enough fields to
        /// cross into the indexed lookups, against an ordered list.
        #[test]
        fn fields_match_a_list_model(ops in prop::collection::vec((any::<bool>(), 0u8..40, any::<u8>()), 0..200)) {
            let names: Vec<Vec<u8>> = (0u8..40).map(|i| format!("field:{i}").into_bytes()).collect();
            let values: Vec<Vec<u8>> = (0..=255u8).map(|i| vec![i; i as usize % 7]).collect();
            let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut data = encoded(&[]);
            for (set, name, value) in ops {
                let mut fields = Fields::decode(&data).unwrap();
                let name = &names[name as usize];
                let at = model.iter().position(|(n, _)| n == name);
                if set {
                    let new = fields.set(name, Cow::Borrowed(&values[value as usize]));
                    prop_assert_eq!(new, at.is_none());
                    match at {
                        Some(at) => model[at].1 = values[value as usize].clone(),
                        None => model.push((name.clone(), values[value as usize].clone())),
                    }
                } else {
                    prop_assert_eq!(fields.remove(name), at.is_some());
                    if let Some(at) = at {
                        model.remove(at);
                    }
                }
                prop_assert_eq!(fields.len(), model.len());
                for (n, v) in &model {
                    prop_assert_eq!(fields.get(n), Some(&v[..]));
                }
                data = fields.encode();
                let listed: Vec<(Vec<u8>, Vec<u8>)> =
                    pairs(&data).map(|p| p.map(|(f, v)| (f.to_vec(), v.to_vec()))).collect::<Result<_, _>>().unwrap();
                prop_assert_eq!(&listed, &model);
            }
        }

        /// Arbitrary bytes decode or fail; they never panic.
        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = Fields::decode(&data);
            let _ = pairs(&data).count();
            let _ = get(&data, b"x");
        }
    }
}
