//! A YCSB record: `fieldcount` named fields of `fieldlength` bytes. Values
//! are derived from the key and the field name (YCSB's `dataintegrity`),
//! so every read can be checked byte for byte whatever wrote it last.

/// The record layout every target stores.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub fields: usize,
    pub field_length: usize,
}

pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

pub fn field_name(i: usize) -> Vec<u8> {
    format!("field{i}").into_bytes()
}

/// Printable bytes for `key`'s field `i`, the same on every call.
pub fn field_value(key: &str, i: usize, length: usize) -> Vec<u8> {
    // FNV-1a over key and field number seeds an xorshift stream; each
    // step gives eight bytes.
    let mut state = key
        .bytes()
        .chain(i.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        | 1;
    let mut out = Vec::with_capacity(length + 8);
    while out.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend(state.to_le_bytes().map(|b| b' ' + b % 95));
    }
    out.truncate(length);
    out
}

impl Shape {
    /// Every field of a fresh record.
    pub fn record(&self, key: &str) -> Fields {
        (0..self.fields).map(|i| (field_name(i), field_value(key, i, self.field_length))).collect()
    }

    /// Whether `fields` is exactly `key`'s record: every field once, each
    /// with its bytes.
    pub fn is_intact(&self, key: &str, fields: &Fields) -> bool {
        let mut seen = vec![false; self.fields];
        fields.len() == self.fields
            && fields.iter().all(|(name, value)| {
                let index = name.strip_prefix(b"field").and_then(|n| std::str::from_utf8(n).ok()?.parse().ok());
                index.is_some_and(|i: usize| {
                    i < self.fields
                        && !std::mem::replace(&mut seen[i], true)
                        && *value == field_value(key, i, self.field_length)
                })
            })
    }
}

/// One value holding a whole record, for stores without hashes (the
/// embedded engines and memcached): per field a u32 name length, the
/// name, a u32 value length, the value (YCSB's RocksDB binding's layout).
pub fn encode(fields: &Fields) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|(n, v)| 8 + n.len() + v.len()).sum());
    for (name, value) in fields {
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

pub fn decode(mut bytes: &[u8]) -> Result<Fields, String> {
    let take = |bytes: &mut &[u8]| -> Result<Vec<u8>, String> {
        let len = bytes.get(..4).ok_or("record cut short")?;
        let len = u32::from_be_bytes(len.try_into().expect("four bytes")) as usize;
        let part = bytes.get(4..4 + len).ok_or("record cut short")?.to_vec();
        *bytes = &bytes[4 + len..];
        Ok(part)
    };
    let mut fields = Vec::new();
    while !bytes.is_empty() {
        let name = take(&mut bytes)?;
        fields.push((name, take(&mut bytes)?));
    }
    Ok(fields)
}

/// `fields` with `update`'s fields replaced or added.
pub fn merge(mut fields: Fields, update: &Fields) -> Fields {
    for (name, value) in update {
        match fields.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1.clone_from(value),
            None => fields.push((name.clone(), value.clone())),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_check() {
        let shape = Shape { fields: 10, field_length: 100 };
        let record = shape.record("user42");
        assert_eq!(record.len(), 10);
        assert!(record.iter().all(|(_, v)| v.len() == 100 && v.iter().all(|b| (b' '..=b'~').contains(b))));
        assert_eq!(decode(&encode(&record)).unwrap(), record);
        assert!(shape.is_intact("user42", &record));
        assert!(!shape.is_intact("user43", &record), "another key's values");
        let mut damaged = record.clone();
        damaged[3].1[7] ^= 1;
        assert!(!shape.is_intact("user42", &damaged));
        assert!(!shape.is_intact("user42", &record[..9].to_vec()), "a field missing");
        let mut twice = record.clone();
        twice[1] = twice[0].clone();
        assert!(!shape.is_intact("user42", &twice), "a field twice, another missing");
        assert!(decode(&encode(&record)[..50]).is_err());
    }

    #[test]
    fn merge_replaces_named_fields() {
        let shape = Shape { fields: 3, field_length: 5 };
        let record = shape.record("k");
        let update = vec![(field_name(1), b"xxxxx".to_vec())];
        let merged = merge(record.clone(), &update);
        assert_eq!(merged[1].1, b"xxxxx");
        assert_eq!(merged[0], record[0]);
        assert_eq!(merged.len(), 3);
    }
}
