//! A stream in Redis's serialization. DUMP writes
//! RDB_TYPE_STREAM_LISTPACKS_2, what Redis 7.0 writes; RESTORE also reads
//! RDB_TYPE_STREAM_LISTPACKS (Redis 5.0 to 6.2: without the first ID, the
//! last deleted ID, the entries-added counter and the groups' entries-read
//! counters, which it derives as Redis does) and
//! RDB_TYPE_STREAM_LISTPACKS_3 (Redis 7.2 on: a consumer's active time
//! besides its seen time, dropped: ScaledKV keeps Redis 7.0's one time).
//!
//! The entries go in nodes, each a listpack under its first entry's ID: a
//! master entry (the live and deleted counts, the first entry's fields,
//! 0), then for each entry its flags, its ID's differences from the
//! node's, its fields unless they are the master's, its values, and how
//! many parts that took. DUMP fills nodes as Redis's XADD does (a node
//! ends at 100 entries or 4 KiB, Redis's default `stream-node-max-entries`
//! and `stream-node-max-bytes`), so a stream only ever added to dumps byte
//! for byte as Redis 7.0 dumps it with `rdbcompression no`.

use std::collections::{BTreeMap, HashMap};

use super::listpack::{self, Writer};
use super::{write_length, write_string, Reader, Refused};
use crate::commands::args::parse_i64;
use crate::commands::table::{self, Table};
use crate::commands::{CmdError, CmdResult, Ctx};
use crate::hash::Corrupt;
use crate::keyspace::{Value, TYPE_STREAM_TABLE};
use crate::stream::{
    decode_pairs, encode_pairs, entry_field, group_field, nack_field, split_nack_field, Consumer, Group, Meta, Nack,
    StreamId, ENTRY, GROUP, NACK,
};

/// RDB_TYPE_STREAM_LISTPACKS, _2 and _3.
pub const TYPE_LISTPACKS: u8 = 15;
pub const TYPE_LISTPACKS_2: u8 = 19;
pub const TYPE_LISTPACKS_3: u8 = 21;

const FLAG_DELETED: i64 = 1;
const FLAG_SAME_FIELDS: i64 = 2;
const NODE_MAX_ENTRIES: usize = 100;
const NODE_MAX_BYTES: usize = 4096;

/// A stream's whole state, as DUMP reads it and RESTORE writes it.
#[derive(Debug, PartialEq, Default)]
pub struct StreamObject {
    /// Its stub, but for the table id.
    pub meta: Meta,
    /// Its entries in ID order, each encoded as the engine holds it
    /// (`crate::stream::encode_pairs`).
    pub entries: Vec<(StreamId, Vec<u8>)>,
    pub groups: Vec<GroupObject>,
}

#[derive(Debug, PartialEq)]
pub struct GroupObject {
    pub name: Vec<u8>,
    pub group: Group,
    /// Its pending entries in ID order.
    pub pending: Vec<(StreamId, Nack)>,
}

/// The stream `value` holds, read whole.
pub fn read(ctx: &mut Ctx<'_>, value: &Value) -> Result<StreamObject, CmdError> {
    let meta = Meta::decode(value.data())?;
    let mut stream = StreamObject { meta: Meta { table: 0, ..meta }, ..StreamObject::default() };
    // Entries, then groups by name, then pending entries by group.
    for (field, data) in table::entries(ctx, &Table::of(value)?, None, usize::MAX)? {
        match field.first() {
            Some(&ENTRY) => stream.entries.push((StreamId::from_bytes(&field[1..])?, data)),
            Some(&GROUP) => {
                let group = Group::decode(&data)?;
                stream.groups.push(GroupObject { name: field[1..].to_vec(), group, pending: Vec::new() });
            }
            Some(&NACK) => {
                let (name, id) = split_nack_field(&field)?;
                let at = stream.groups.binary_search_by(|g| g.name.as_slice().cmp(name)).map_err(|_| Corrupt)?;
                stream.groups[at].pending.push((id, Nack::decode(&data)?));
            }
            _ => return Err(Corrupt.into()),
        }
    }
    Ok(stream)
}

/// Stores a restored stream at `key` as a new table.
pub fn store(ctx: &mut Ctx<'_>, key: &[u8], stream: StreamObject, expiry: Option<u64>) -> CmdResult {
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> =
        stream.entries.into_iter().map(|(id, data)| (entry_field(id).to_vec(), data)).collect();
    for group in &stream.groups {
        fields.push((group_field(&group.name), group.group.encode()));
        fields.extend(group.pending.iter().map(|(id, nack)| (nack_field(&group.name, *id), nack.encode())));
    }
    let table = table::fill(ctx, key, TYPE_STREAM_TABLE, fields.iter().map(|(f, v)| (&f[..], &v[..])))?;
    let meta = Meta { table: table.id, ..stream.meta };
    ctx.writes.put(key, TYPE_STREAM_TABLE, &meta.encode(), expiry)
}

/// The object DUMP writes for a stream (type byte and all).
pub fn serialize(stream: &StreamObject) -> Result<Vec<u8>, Corrupt> {
    let mut out = vec![TYPE_LISTPACKS_2];
    let nodes = nodes(&stream.entries)?;
    write_length(&mut out, nodes.len() as u64);
    for (key, listpack) in &nodes {
        write_string(&mut out, &key.to_bytes());
        write_string(&mut out, listpack);
    }
    let meta = &stream.meta;
    write_length(&mut out, meta.length);
    for id in [meta.last_id, meta.first_id, meta.max_deleted] {
        write_id(&mut out, id);
    }
    write_length(&mut out, meta.entries_added);
    write_length(&mut out, stream.groups.len() as u64);
    for GroupObject { name, group, pending } in &stream.groups {
        write_string(&mut out, name);
        write_id(&mut out, group.last_id);
        // Unknown is -1 in Redis, written as an unsigned length.
        write_length(&mut out, group.entries_read.unwrap_or(u64::MAX));
        write_length(&mut out, pending.len() as u64);
        let mut owned: HashMap<&[u8], Vec<StreamId>> = HashMap::new();
        for (id, nack) in pending {
            out.extend_from_slice(&id.to_bytes());
            out.extend_from_slice(&nack.delivered_ms.to_le_bytes());
            write_length(&mut out, nack.deliveries);
            owned.entry(&nack.consumer).or_default().push(*id);
        }
        write_length(&mut out, group.consumers.len() as u64);
        for consumer in &group.consumers {
            write_string(&mut out, &consumer.name);
            out.extend_from_slice(&consumer.seen_ms.to_le_bytes());
            let ids = owned.get(&consumer.name[..]).map_or(&[][..], Vec::as_slice);
            write_length(&mut out, ids.len() as u64);
            for id in ids {
                out.extend_from_slice(&id.to_bytes());
            }
        }
    }
    Ok(out)
}

fn write_id(out: &mut Vec<u8>, id: StreamId) {
    write_length(out, id.ms);
    write_length(out, id.seq);
}

/// A node being filled: its key (first entry's ID), the master entry's
/// fields, and its entries after the master entry.
struct Node<'a> {
    key: StreamId,
    fields: Vec<&'a [u8]>,
    entries: usize,
    body: Writer,
    /// The master entry's bytes: its live count stays one byte (at most
    /// 100 entries), so they do not change as entries are added.
    master_bytes: usize,
}

impl<'a> Node<'a> {
    fn new(key: StreamId, parts: &[&'a [u8]]) -> Node<'a> {
        let fields: Vec<&[u8]> = parts.iter().step_by(2).copied().collect();
        let master_bytes = Node::master(1, &fields).bytes();
        Node { key, fields, entries: 0, body: Writer::default(), master_bytes }
    }

    fn master(live: usize, fields: &[&[u8]]) -> Writer {
        let mut master = Writer::default();
        for count in [live, 0, fields.len()] {
            master.push_int(count as i64);
        }
        for field in fields {
            master.push(field);
        }
        master.push_int(0);
        master
    }

    /// Whether Redis's XADD would start a new node rather than add an
    /// entry of `size` bytes of fields and values to this one.
    fn full(&self, size: usize) -> bool {
        self.master_bytes + self.body.body_len() + size >= NODE_MAX_BYTES || self.entries >= NODE_MAX_ENTRIES
    }

    fn add(&mut self, id: StreamId, parts: &[&[u8]]) {
        let fields = parts.len() / 2;
        let same = fields == self.fields.len() && parts.iter().step_by(2).zip(&self.fields).all(|(a, b)| a == b);
        let body = &mut self.body;
        body.push_int(if same { FLAG_SAME_FIELDS } else { 0 });
        body.push_int(id.ms.wrapping_sub(self.key.ms) as i64);
        body.push_int(id.seq.wrapping_sub(self.key.seq) as i64);
        if same {
            parts.iter().skip(1).step_by(2).for_each(|value| body.push(value));
        } else {
            body.push_int(fields as i64);
            parts.iter().for_each(|part| body.push(part));
        }
        // The parts of this entry before this one: flags, two deltas, the
        // values, and the count and fields where they are written.
        let written = 3 + fields + if same { 0 } else { fields + 1 };
        body.push_int(written as i64);
        self.entries += 1;
    }

    fn finish(self) -> (StreamId, Vec<u8>) {
        let mut listpack = Node::master(self.entries, &self.fields);
        listpack.append(self.body);
        (self.key, listpack.finish())
    }
}

/// A stream's entries in nodes, as Redis's XADD would have filled them.
fn nodes(entries: &[(StreamId, Vec<u8>)]) -> Result<Vec<(StreamId, Vec<u8>)>, Corrupt> {
    let mut nodes = Vec::new();
    let mut open: Option<Node<'_>> = None;
    for (id, data) in entries {
        let parts = decode_pairs(data)?;
        let size = parts.iter().map(|part| part.len()).sum();
        if let Some(node) = open.take_if(|node| node.full(size)) {
            nodes.push(node.finish());
        }
        open.get_or_insert_with(|| Node::new(*id, &parts)).add(*id, &parts);
    }
    nodes.extend(open.map(Node::finish));
    Ok(nodes)
}

/// The stream of a payload's object of type `kind` (after its type byte).
pub fn deserialize(kind: u8, object: &mut Reader<'_>) -> Result<StreamObject, Refused> {
    let mut stream = StreamObject::default();
    for _ in 0..object.number()? {
        let key = object.string()?;
        let key = StreamId::from_bytes(&key).ok().filter(|_| key.len() == 16).ok_or(Refused::BadFormat)?;
        read_node(key, &object.string()?, &mut stream.entries)?;
    }
    let meta = &mut stream.meta;
    meta.length = object.number()?;
    meta.last_id = read_id(object)?;
    if kind == TYPE_LISTPACKS {
        meta.first_id = stream.entries.first().map_or(StreamId::MIN, |(id, _)| *id);
        meta.entries_added = meta.length;
    } else {
        meta.first_id = read_id(object)?;
        meta.max_deleted = read_id(object)?;
        meta.entries_added = object.number()?;
    }
    let last = stream.entries.last().map(|(id, _)| *id);
    if meta.length != stream.entries.len() as u64 || last.is_some_and(|last| last > meta.last_id) {
        return Err(Refused::BadFormat);
    }
    let groups = object.number()?;
    for _ in 0..groups {
        let name = object.string()?;
        let last_id = read_id(object)?;
        let entries_read = match kind {
            TYPE_LISTPACKS => stream.meta.entries_up_to(last_id),
            _ => u64::try_from(object.number()? as i64).ok(),
        };
        let (group, pending) = read_group_state(kind, object, last_id, entries_read)?;
        stream.groups.push(GroupObject { name, group, pending });
    }
    stream.groups.sort_by(|a, b| a.name.cmp(&b.name));
    if stream.groups.windows(2).any(|pair| pair[0].name == pair[1].name) {
        return Err(Refused::BadFormat);
    }
    stream.meta.groups = groups;
    Ok(stream)
}

fn read_id(object: &mut Reader<'_>) -> Result<StreamId, Refused> {
    Ok(StreamId::new(object.number()?, object.number()?))
}

fn raw_id(object: &mut Reader<'_>) -> Result<StreamId, Refused> {
    StreamId::from_bytes(object.take(16)?).map_err(|_| Refused::BadFormat)
}

fn millis(object: &mut Reader<'_>) -> Result<u64, Refused> {
    Ok(u64::from_le_bytes(object.take(8)?.try_into().expect("8 bytes")))
}

/// A group's pending entries (the group's list, then each consumer's) and
/// consumers. Every pending entry must be one consumer's: Redis's own
/// deep check of a payload refuses one that is no one's.
fn read_group_state(
    kind: u8,
    object: &mut Reader<'_>,
    last_id: StreamId,
    entries_read: Option<u64>,
) -> Result<(Group, Vec<(StreamId, Nack)>), Refused> {
    let mut pending: BTreeMap<StreamId, Nack> = BTreeMap::new();
    for _ in 0..object.number()? {
        let id = raw_id(object)?;
        let nack = Nack { delivered_ms: millis(object)?, deliveries: object.number()?, consumer: Vec::new() };
        if pending.insert(id, nack).is_some() {
            return Err(Refused::BadFormat);
        }
    }
    let mut group = Group { last_id, entries_read, consumers: Vec::new() };
    for _ in 0..object.number()? {
        let name = object.string()?;
        let seen_ms = millis(object)?;
        if kind == TYPE_LISTPACKS_3 {
            millis(object)?;
        }
        let mut owned = 0;
        for _ in 0..object.number()? {
            let nack = pending.get_mut(&raw_id(object)?).ok_or(Refused::BadFormat)?;
            if !nack.consumer.is_empty() {
                return Err(Refused::BadFormat);
            }
            nack.consumer = name.clone();
            owned += 1;
        }
        group.consumers.push(Consumer { name, seen_ms, pending: owned });
    }
    group.consumers.sort_by(|a, b| a.name.cmp(&b.name));
    let unique = group.consumers.windows(2).all(|pair| pair[0].name != pair[1].name);
    // A consumer's name is never empty (XREADGROUP and XGROUP refuse it).
    let owned = pending.values().all(|nack| !nack.consumer.is_empty());
    if !unique || !owned {
        return Err(Refused::BadFormat);
    }
    Ok((group, pending.into_iter().collect()))
}

/// Appends the live entries of the node under `key` to `entries`, which
/// must stay in strictly increasing ID order.
fn read_node(key: StreamId, listpack: &[u8], entries: &mut Vec<(StreamId, Vec<u8>)>) -> Result<(), Refused> {
    let parts = listpack::entries(listpack)?;
    let mut parts = parts.iter().map(|part| &part[..]);
    let (live, deleted, field_count) = (count(&mut parts)?, count(&mut parts)?, count(&mut parts)?);
    let mut fields = Vec::new();
    for _ in 0..field_count {
        fields.push(next(&mut parts)?);
    }
    if int(&mut parts)? != 0 {
        return Err(Refused::BadFormat);
    }
    let (mut seen_live, mut seen_deleted) = (0, 0);
    let mut pairs: Vec<&[u8]> = Vec::new();
    while parts.len() > 0 {
        let flags = int(&mut parts)?;
        if flags & !(FLAG_DELETED | FLAG_SAME_FIELDS) != 0 {
            return Err(Refused::BadFormat);
        }
        let ms = key.ms.wrapping_add(int(&mut parts)? as u64);
        let id = StreamId::new(ms, key.seq.wrapping_add(int(&mut parts)? as u64));
        let same = flags & FLAG_SAME_FIELDS != 0;
        pairs.clear();
        let pair_count = if same {
            for field in &fields {
                pairs.extend([*field, next(&mut parts)?]);
            }
            fields.len()
        } else {
            let pair_count = count(&mut parts)?;
            for _ in 0..pair_count {
                pairs.extend([next(&mut parts)?, next(&mut parts)?]);
            }
            pair_count
        };
        let written = 3 + pair_count + if same { 0 } else { pair_count + 1 };
        if count(&mut parts)? != written {
            return Err(Refused::BadFormat);
        }
        if flags & FLAG_DELETED != 0 {
            seen_deleted += 1;
            continue;
        }
        seen_live += 1;
        // 0-0 is no entry's ID (XADD refuses it).
        if id.is_zero() || entries.last().is_some_and(|(last, _)| *last >= id) {
            return Err(Refused::BadFormat);
        }
        entries.push((id, encode_pairs(&pairs)));
    }
    if (seen_live, seen_deleted) != (live, deleted) {
        return Err(Refused::BadFormat);
    }
    Ok(())
}

fn next<'p>(parts: &mut impl Iterator<Item = &'p [u8]>) -> Result<&'p [u8], Refused> {
    parts.next().ok_or(Refused::BadFormat)
}

fn int<'p>(parts: &mut impl Iterator<Item = &'p [u8]>) -> Result<i64, Refused> {
    parse_i64(next(parts)?).ok_or(Refused::BadFormat)
}

fn count<'p>(parts: &mut impl Iterator<Item = &'p [u8]>) -> Result<usize, Refused> {
    usize::try_from(int(parts)?).map_err(|_| Refused::BadFormat)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{deserialize, with_footer, Object};
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    fn entry(ms: u64, seq: u64, parts: &[&str]) -> (StreamId, Vec<u8>) {
        (id(ms, seq), encode_pairs(parts))
    }

    fn nack(delivered_ms: u64, consumer: &str) -> Nack {
        Nack { delivered_ms, deliveries: 1, consumer: consumer.as_bytes().to_vec() }
    }

    fn consumer(name: &str, seen_ms: u64, pending: u64) -> Consumer {
        Consumer { name: name.as_bytes().to_vec(), seen_ms, pending }
    }

    fn stream_of(payload: &[u8]) -> Result<StreamObject, Refused> {
        match deserialize(payload)? {
            Object::Stream(stream) => Ok(stream),
            Object::Value(..) => Err(Refused::OtherType),
        }
    }

    /// Redis 7.0.15: XADD s 1-1 name alpha n 1, XADD s 1-2 name beta n 2,
    /// XADD s 2-0 other -300, XADD s 3-0 name gamma n 3, XDEL s 1-2,
    /// XGROUP CREATE s g 0, XGROUP CREATE s h 2-0, XREADGROUP GROUP g alice
    /// COUNT 2 STREAMS s >, XCLAIM s g bob 0 2-0 JUSTID, XGROUP
    /// CREATECONSUMER s h carol; DUMP s.
    const REDIS_PAYLOAD: &str = "130110000000000000000100000000000000014060600000001f00030101010201846e616d6505816e02000102010001000185616c70686106010105010301000101018462657461050201050100010101dfff020101856f7468657206ded402060102010201dfff028567616d6d610603010501ff0303000101010204020167020081ffffffffffffffff0200000000000000010000000000000001029f9733a201000001000000000000000200000000000000000a9f9733a2010000010205616c696365029f9733a2010000010000000000000001000000000000000103626f620a9f9733a201000001000000000000000200000000000000000168020081ffffffffffffffff0001056361726f6c119f9733a2010000000a00b46f22b703d66fbb";

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    fn redis_stream() -> StreamObject {
        let (alice, bob, carol) = (1_796_161_904_386, 1_796_161_904_394, 1_796_161_904_401);
        StreamObject {
            meta: Meta {
                length: 3,
                last_id: id(3, 0),
                first_id: id(1, 1),
                max_deleted: id(1, 2),
                entries_added: 4,
                groups: 2,
                ..Meta::default()
            },
            entries: vec![
                entry(1, 1, &["name", "alpha", "n", "1"]),
                entry(2, 0, &["other", "-300"]),
                entry(3, 0, &["name", "gamma", "n", "3"]),
            ],
            groups: vec![
                GroupObject {
                    name: b"g".to_vec(),
                    group: Group {
                        last_id: id(2, 0),
                        entries_read: None,
                        consumers: vec![consumer("alice", alice, 1), consumer("bob", bob, 1)],
                    },
                    pending: vec![(id(1, 1), nack(alice, "alice")), (id(2, 0), nack(bob, "bob"))],
                },
                GroupObject {
                    name: b"h".to_vec(),
                    group: Group {
                        last_id: id(2, 0),
                        entries_read: None,
                        consumers: vec![consumer("carol", carol, 0)],
                    },
                    pending: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn reads_what_redis_dumps_a_stream_as() {
        let payload = unhex(REDIS_PAYLOAD);
        assert_eq!(stream_of(&payload), Ok(redis_stream()));
        // The deleted entry kept in the node is left out; writing the
        // stream back compacts the node.
        let again = with_footer(serialize(&redis_stream()).unwrap());
        assert!(again.len() < payload.len());
        assert_eq!(stream_of(&again), Ok(redis_stream()));
        for payload in [payload, again] {
            for cut in 0..payload.len() {
                assert!(deserialize(&payload[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    /// The stream's object as Redis 5 to 6.2 (no counters, `old`) or 7.2
    /// on (consumers' active times) writes it.
    fn older_or_newer(stream: &StreamObject, old: bool) -> Vec<u8> {
        let mut out = vec![if old { TYPE_LISTPACKS } else { TYPE_LISTPACKS_3 }];
        let nodes = nodes(&stream.entries).unwrap();
        write_length(&mut out, nodes.len() as u64);
        for (key, listpack) in &nodes {
            write_string(&mut out, &key.to_bytes());
            write_string(&mut out, listpack);
        }
        write_length(&mut out, stream.meta.length);
        write_id(&mut out, stream.meta.last_id);
        if !old {
            write_id(&mut out, stream.meta.first_id);
            write_id(&mut out, stream.meta.max_deleted);
            write_length(&mut out, stream.meta.entries_added);
        }
        write_length(&mut out, stream.groups.len() as u64);
        for GroupObject { name, group, pending } in &stream.groups {
            write_string(&mut out, name);
            write_id(&mut out, group.last_id);
            if !old {
                write_length(&mut out, group.entries_read.unwrap_or(u64::MAX));
            }
            write_length(&mut out, pending.len() as u64);
            for (id, nack) in pending {
                out.extend_from_slice(&id.to_bytes());
                out.extend_from_slice(&nack.delivered_ms.to_le_bytes());
                write_length(&mut out, nack.deliveries);
            }
            write_length(&mut out, group.consumers.len() as u64);
            for consumer in &group.consumers {
                write_string(&mut out, &consumer.name);
                out.extend_from_slice(&consumer.seen_ms.to_le_bytes());
                if !old {
                    out.extend_from_slice(&(consumer.seen_ms + 5).to_le_bytes());
                }
                let owned: Vec<&StreamId> =
                    pending.iter().filter(|(_, nack)| nack.consumer == consumer.name).map(|(id, _)| id).collect();
                write_length(&mut out, owned.len() as u64);
                for id in owned {
                    out.extend_from_slice(&id.to_bytes());
                }
            }
        }
        with_footer(out)
    }

    #[test]
    fn reads_the_streams_of_redis_before_and_after_7_0() {
        let mut stream = redis_stream();
        stream.groups[1].group.last_id = id(3, 0);
        assert_eq!(stream_of(&older_or_newer(&stream, false)).as_ref(), Ok(&stream));
        // Before 7.0: no deleted ID, entries added counted as its length,
        // a group's entries read derived where Redis can tell (group h has
        // read to the last entry; g to one in the middle, unknown).
        let read = stream_of(&older_or_newer(&stream, true)).unwrap();
        stream.meta.max_deleted = StreamId::MIN;
        stream.meta.entries_added = 3;
        stream.groups[1].group.entries_read = Some(3);
        assert_eq!(read, stream);
    }

    #[test]
    fn inconsistent_streams_are_refused() {
        type Damage = fn(&mut StreamObject);
        let cases: [(&str, Damage); 6] = [
            ("a length that is not the entries'", |s| s.meta.length = 2),
            ("an entry after the last ID", |s| s.meta.last_id = id(2, 5)),
            ("an entry twice", |s| s.entries[1].0 = id(1, 1)),
            ("the entry 0-0", |s| s.entries[0].0 = id(0, 0)),
            ("a group twice", |s| s.groups[1].name = b"g".to_vec()),
            ("a consumer twice", |s| s.groups[1].group.consumers.push(consumer("carol", 1, 0))),
        ];
        for (what, damage) in cases {
            let mut stream = redis_stream();
            damage(&mut stream);
            let payload = with_footer(serialize(&stream).unwrap());
            assert_eq!(stream_of(&payload), Err(Refused::BadFormat), "{what}");
        }
        // A pending entry of no consumer, or of one not in the group's list.
        let mut stream = redis_stream();
        stream.groups[0].pending[1].1.consumer = b"nobody".to_vec();
        assert_eq!(stream_of(&with_footer(serialize(&stream).unwrap())), Err(Refused::BadFormat));
        let mut stream = redis_stream();
        stream.groups[0].group.consumers[1].name = b"alice".to_vec();
        stream.groups[0].group.consumers[1].name.push(b'2');
        stream.groups[0].pending.pop();
        let mut payload = serialize(&stream).unwrap();
        // bob's pending list names an entry the group does not have.
        let at = payload.windows(6).position(|w| w == b"alice2").unwrap() + 6 + 8;
        payload.splice(at..at + 1, [1].iter().chain(&id(2, 0).to_bytes()).copied());
        assert_eq!(stream_of(&with_footer(payload)), Err(Refused::BadFormat));
    }

    fn arbitrary_stream() -> impl Strategy<Value = StreamObject> {
        let fields = prop::sample::select(vec!["f", "g", "name", "7", "-1"]);
        let value = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..12),
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            (0usize..2).prop_map(|i| vec![b'z'; [300, 5000][i]]),
        ];
        let entry = (0u64..3, any::<u64>(), prop::collection::vec((fields, value), 1..4));
        let entries = prop::collection::vec(entry, 0..150);
        let groups = prop::collection::btree_map(
            "[a-c0-9]{1,3}",
            (any::<u64>(), any::<Option<u32>>(), prop::collection::vec(("[xy]{1,2}", any::<u32>()), 0..20)),
            0..3,
        );
        (entries, groups, any::<u64>()).prop_map(|(entries, groups, deleted)| {
            let mut stream = StreamObject::default();
            let mut at = id(1, 0);
            for (step, seq, pairs) in entries {
                // Steps of the same millisecond, the next, or far ahead.
                at = match step {
                    0 => id(at.ms, at.seq + 1 + seq % 3),
                    1 => id(at.ms + 1, seq % 1000),
                    _ => id(at.ms + (seq >> 20), seq % 7),
                };
                let parts: Vec<Vec<u8>> =
                    pairs.into_iter().flat_map(|(field, value)| [field.as_bytes().to_vec(), value]).collect();
                stream.entries.push((at, encode_pairs(&parts)));
            }
            let last = stream.entries.last().map_or(id(0, 0), |(id, _)| *id);
            stream.meta = Meta {
                length: stream.entries.len() as u64,
                last_id: id(last.ms + deleted % 2, last.seq),
                first_id: stream.entries.first().map_or(StreamId::MIN, |(id, _)| *id),
                max_deleted: id(deleted % 5, 0),
                entries_added: stream.entries.len() as u64 + deleted % 9,
                groups: groups.len() as u64,
                ..Meta::default()
            };
            for (name, (last, read, pending)) in groups {
                let mut group =
                    Group { last_id: id(last >> 1, 0), entries_read: read.map(u64::from), consumers: vec![] };
                // A pending entry is one consumer's: the first named keeps it.
                let mut nacks = BTreeMap::new();
                for (owner, ms) in pending {
                    let nack =
                        Nack { delivered_ms: u64::from(ms), deliveries: u64::from(ms % 4), consumer: owner.into() };
                    nacks.entry(id(u64::from(ms), 0)).or_insert(nack);
                }
                for nack in nacks.values() {
                    group.consumer(&nack.consumer, nack.delivered_ms).0.pending += 1;
                }
                // And a consumer with none.
                group.consumer(b"idle", last);
                stream.groups.push(GroupObject {
                    name: name.into_bytes(),
                    group,
                    pending: nacks.into_iter().collect(),
                });
            }
            stream
        })
    }

    proptest! {
        /// A stream reads back as it was written: entries with fields
        /// like and unlike their node's first ones, nodes ended by count
        /// and by size, IDs stepping by small and big amounts, groups
        /// with consumers and pending entries.
        #[test]
        fn streams_survive_a_round_trip(stream in arbitrary_stream()) {
            let payload = with_footer(serialize(&stream).unwrap());
            prop_assert_eq!(stream_of(&payload), Ok(stream));
        }

        /// Any bytes after a stream's type are read or refused, never a
        /// panic.
        #[test]
        fn any_stream_object_is_read_or_refused(
            kind in prop::sample::select(vec![TYPE_LISTPACKS, TYPE_LISTPACKS_2, TYPE_LISTPACKS_3]),
            object in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut payload = vec![kind];
            payload.extend_from_slice(&object);
            let _ = deserialize(&with_footer(payload));
        }
    }
}
