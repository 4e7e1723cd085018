//! A big list's elements, up to 32 to an engine entry.
//!
//! A list past 8 KiB becomes a table (`table`); its stub holds the position
//! of its first element (`head`) and the count, and positions only grow at
//! the tail and shrink at the head, so an index is a position. Tables of
//! this layout (`CHUNKED` in the stub's fourth word) keep the positions
//! `c * SLOTS .. (c + 1) * SLOTS` in one entry, chunk `c`: LRANGE of 600
//! elements reads 19 entries instead of 600 (each a log read, a checksum
//! and a cache miss; the list commands' only loss to Redis in its default
//! benchmark). A push or a pop rewrites its chunk: at most 32 elements of
//! at most `SPILL_BYTES`, since a longer element gets an entry of its own
//! beside its chunk (its key is the chunk's plus the slot), as in the
//! layout before, where every element had one (tables made before it keep
//! that layout: `commands::lists`).
//!
//! A chunk's value: the slot of its first element (a byte), then its
//! elements in `crate::hash`'s layout, each paired with an empty value, or
//! a spilled one's empty element with the value `SPILLED`.

use std::collections::BTreeMap;

use super::table::{self, Table, TYPE_FIELD};
use super::{CmdError, CmdResult, Ctx};
use crate::hash::{self, Corrupt};
use crate::keyspace::{Value, Writes, TYPE_LIST_TABLE};

/// The stub's layout word of a list kept in chunks.
pub const CHUNKED: u64 = 1;
/// Positions per chunk.
const SLOTS: i64 = 32;
/// Longest element kept in its chunk.
const SPILL_BYTES: usize = 64;
const SPILLED: &[u8] = b"\x01";

enum Slot {
    /// Where its bytes lie in `Chunk::read` (not copied one by one: a
    /// push or a pop reads a chunk of up to 32).
    Read(std::ops::Range<usize>),
    Inline(Vec<u8>),
    /// In an entry of its own; its bytes when this command wrote it.
    Spilled(Option<Vec<u8>>),
}

impl Slot {
    /// The element's bytes, unless spilled and not read.
    fn bytes<'a>(&'a self, read: &'a [u8]) -> Option<&'a [u8]> {
        match self {
            Slot::Read(at) => Some(&read[at.clone()]),
            Slot::Inline(element) | Slot::Spilled(Some(element)) => Some(element),
            Slot::Spilled(None) => None,
        }
    }
}

/// A chunk a command read or changed.
struct Chunk {
    /// While `slots` is None, its value now (empty when it holds nothing):
    /// a push or a pop at either end of it changes these bytes in place.
    /// Once decoded, its value as read, where `Slot::Read` points.
    read: Vec<u8>,
    /// Slot `i` holds position `c * SLOTS + i`; decoded only for a change
    /// or a read within it. A pipeline of pushes to one list decoded and
    /// re-encoded 32 elements per push: 13% of an LPUSH's CPU.
    slots: Option<Vec<Option<Slot>>>,
    /// Whether the engine holds an entry for it.
    stored: bool,
    dirty: bool,
}

/// A chunk's first slot and its element count, from its header.
fn header(data: &[u8]) -> Result<(usize, usize), Corrupt> {
    let (&first, rest) = data.split_first().ok_or(Corrupt)?;
    let count = hash::count(rest)?;
    if count == 0 || first as usize + count > SLOTS as usize {
        return Err(Corrupt);
    }
    Ok((first as usize, count))
}

/// Where the element of a chunk's pair lies, whether it is spilled, and
/// where the pair ends, as offsets into `data`.
fn pair_at(data: &[u8], pair: (&[u8], &[u8])) -> (std::ops::Range<usize>, bool, usize) {
    let offset = |bytes: &[u8]| bytes.as_ptr() as usize - data.as_ptr() as usize;
    let (element, marker) = pair;
    let start = offset(element);
    (start..start + element.len(), !marker.is_empty(), offset(marker) + marker.len())
}

/// The pair that holds `element` in a chunk.
fn pair_of(element: &Slot) -> (&[u8], &[u8]) {
    match element {
        Slot::Spilled(_) => (b"", SPILLED),
        Slot::Inline(element) => (element, b""),
        Slot::Read(_) => unreachable!("placed slots are inline or spilled"),
    }
}

impl Chunk {
    /// Its slots, decoded from its bytes the first time.
    fn slots(&mut self) -> Result<&mut Vec<Option<Slot>>, Corrupt> {
        if self.slots.is_none() {
            self.slots = Some(if self.read.is_empty() { empty_slots() } else { decode(&self.read)? });
        }
        Ok(self.slots.as_mut().expect("decoded above"))
    }

    /// Puts `element` in `slot` by changing the bytes, when the chunk is
    /// not decoded and the slot is next to one of its ends; false if not.
    fn place_at_end(&mut self, slot: usize, element: &Slot) -> Result<bool, Corrupt> {
        if self.slots.is_some() {
            return Ok(false);
        }
        let (element, marker) = pair_of(element);
        // Elements kept in a chunk are short: their lengths are one byte.
        debug_assert!(element.len() <= SPILL_BYTES && marker.len() <= 1);
        let pair = [&[element.len() as u8][..], element, &[marker.len() as u8], marker];
        let pair_bytes = 2 + element.len() + marker.len();
        let (first, count, at) = if self.read.is_empty() {
            self.read.reserve_exact(1 + 4 + pair_bytes);
            self.read.extend_from_slice(&[slot as u8, 0, 0, 0, 0]);
            (slot, 0, 5)
        } else {
            let (first, count) = header(&self.read)?;
            if slot + 1 == first {
                (slot, count, 5)
            } else if slot == first + count {
                (first, count, self.read.len())
            } else {
                return Ok(false);
            }
        };
        self.read[0] = first as u8;
        self.read[1..5].copy_from_slice(&((count + 1) as u32).to_le_bytes());
        let tail = self.read.len() - at;
        self.read.resize(self.read.len() + pair_bytes, 0);
        self.read.copy_within(at..at + tail, at + pair_bytes);
        let mut to = at;
        for part in pair {
            self.read[to..to + part.len()].copy_from_slice(part);
            to += part.len();
        }
        Ok(true)
    }

    /// Takes the element in `slot` out by changing the bytes, when the
    /// chunk is not decoded and the slot is one of its ends: its bytes
    /// (if `wanted`) and whether it is spilled; None if not.
    fn take_at_end(&mut self, slot: usize, wanted: bool) -> Result<Option<(Vec<u8>, bool)>, Corrupt> {
        if self.slots.is_some() {
            return Ok(None);
        }
        let (first, count) = header(&self.read)?;
        let last = first + count - 1;
        if slot != first && slot != last {
            return Ok(None);
        }
        let mut pairs = hash::pairs(&self.read[1..]);
        let mut prior_end = 5;
        let mut pair = pairs.next().ok_or(Corrupt)??;
        if slot == last {
            for _ in first..last {
                prior_end = pair_at(&self.read, pair).2;
                pair = pairs.next().ok_or(Corrupt)??;
            }
        }
        let (element, spilled, end) = pair_at(&self.read, pair);
        let taken = if wanted { self.read[element].to_vec() } else { Vec::new() };
        if count == 1 {
            self.read.clear();
        } else {
            self.read.drain(prior_end..end);
            self.read[0] = if slot == first { first as u8 + 1 } else { first as u8 };
            self.read[1..5].copy_from_slice(&((count - 1) as u32).to_le_bytes());
        }
        Ok(Some((taken, spilled)))
    }

    /// Its value now; None when it holds nothing.
    fn encoded(self) -> Option<Vec<u8>> {
        match &self.slots {
            Some(slots) => encode(slots, &self.read),
            None => (!self.read.is_empty()).then_some(self.read),
        }
    }
}

/// Where a command reads what it has not snapshotted: its writes, then
/// the engine.
type Source<'r> = (&'r Writes, &'r scaledkv::Db);

fn source_of<'r>(ctx: &'r Ctx<'_>) -> Source<'r> {
    (&*ctx.writes, &ctx.shared.db)
}

pub struct ChunkedList<'s> {
    pub table: Table,
    chunks: BTreeMap<i64, Chunk>,
    /// Where a reader without locks reads: one snapshot for the stub and
    /// every chunk, as a list changed between two of its reads would
    /// answer a mix (or miss the element a pop took).
    snapshot: Option<scaledkv::Snapshot<'s>>,
    /// What this command did to the list, for the replicas (`store`);
    /// None once it did something these do not say.
    ops: Option<Vec<ListOp>>,
}

/// A position's chunk and slot.
fn split(position: i64) -> (i64, usize) {
    (position.div_euclid(SLOTS), position.rem_euclid(SLOTS) as usize)
}

fn chunk_key(id: u64, chunk: i64) -> Vec<u8> {
    table::member_key(id, &super::lists::position(chunk))
}

fn spill_key(id: u64, chunk: i64, slot: usize) -> Vec<u8> {
    let mut field = [slot as u8; 9];
    field[..8].copy_from_slice(&super::lists::position(chunk));
    table::member_key(id, &field)
}

/// The element spilled from `slot` of the chunk at `key`, next in `walk`
/// (past the spills of earlier slots, which the range does not read).
fn spilled_in<'w>(walk: &'w mut scaledkv::Iter<'_>, key: &[u8], slot: usize) -> Result<&'w [u8], CmdError> {
    loop {
        let (found, _) = walk.next_ref().ok_or(Corrupt)??;
        let spill = found.len() == key.len() + 1 && found.starts_with(key);
        if !spill || found[key.len()] as usize > slot {
            return Err(Corrupt.into());
        }
        if found[key.len()] as usize == slot {
            break;
        }
    }
    let (_, value) = walk.current().ok_or(Corrupt)?;
    Ok(value.get(1..).ok_or(Corrupt)?)
}

fn empty_slots() -> Vec<Option<Slot>> {
    (0..SLOTS).map(|_| None).collect()
}

/// A chunk's element: its slot, and its bytes (None when spilled).
type Entry<'d> = (usize, Option<&'d [u8]>);

/// A chunk's elements in order.
fn entries(data: &[u8]) -> Result<impl Iterator<Item = Result<Entry<'_>, Corrupt>>, Corrupt> {
    let (&first, rest) = data.split_first().ok_or(Corrupt)?;
    Ok(hash::pairs(rest).enumerate().map(move |(i, pair)| {
        let (element, marker) = pair?;
        let slot = first as usize + i;
        if slot >= SLOTS as usize {
            return Err(Corrupt);
        }
        Ok((slot, marker.is_empty().then_some(element)))
    }))
}

/// A chunk's slots, their elements' bytes left in `data`.
fn decode(data: &[u8]) -> Result<Vec<Option<Slot>>, Corrupt> {
    let mut slots = empty_slots();
    for entry in entries(data)? {
        let (at, element) = entry?;
        slots[at] = Some(match element {
            Some(element) => {
                let start = element.as_ptr() as usize - data.as_ptr() as usize;
                Slot::Read(start..start + element.len())
            }
            None => Slot::Spilled(None),
        });
    }
    Ok(slots)
}

/// The chunk's value; None when it holds nothing. Its elements sit in
/// consecutive slots (positions between head and tail).
fn encode(slots: &[Option<Slot>], read: &[u8]) -> Option<Vec<u8>> {
    let first = slots.iter().position(Option::is_some)?;
    let held = || slots[first..].iter().map_while(Option::as_ref);
    fn pair<'a>(slot: &'a Slot, read: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        match slot {
            Slot::Read(at) => (&read[at.clone()], b""),
            Slot::Inline(element) => (element, b""),
            Slot::Spilled(_) => (b"", SPILLED),
        }
    }
    let pairs = || held().map(|slot| pair(slot, read));
    let (count, bytes) = pairs().fold((0, 0), |(n, bytes), (e, m)| (n + 1, bytes + e.len() + m.len()));
    debug_assert!(slots[first + count..].iter().all(Option::is_none), "a gap in a chunk");
    // Sized once: the byte, the count, and a length byte per element and
    // marker (elements are at most `SPILL_BYTES`), where growing it as it
    // filled was 5% of an LPUSH's CPU.
    let mut out = Vec::with_capacity(1 + 4 + 2 * count + bytes);
    out.push(first as u8);
    hash::encode_into(&mut out, count, false, pairs());
    Some(out)
}

/// What a change did to a big list, in the terms of the commands that do
/// it again on a replica holding the list as it was
/// (`master::list_commands`).
#[derive(Debug, Clone, PartialEq)]
pub enum ListOp {
    Push {
        front: bool,
        element: Vec<u8>,
    },
    Pop {
        front: bool,
    },
    Set {
        index: usize,
        element: Vec<u8>,
    },
    /// Keeps the elements `start..start + n`.
    Trim {
        start: usize,
        n: usize,
    },
    /// LINSERT: `element` before (or `after`) the first `pivot`, which a
    /// replica holding the same list finds where the master did.
    Insert {
        after: bool,
        pivot: Vec<u8>,
        element: Vec<u8>,
    },
    /// LREM: up to `count` elements equal to `element` (0: all; below
    /// 0: from the tail).
    Remove {
        count: i64,
        element: Vec<u8>,
    },
}

impl<'s> ChunkedList<'s> {
    pub fn new(table: Table) -> ChunkedList<'s> {
        ChunkedList { table, chunks: BTreeMap::new(), snapshot: None, ops: Some(Vec::new()) }
    }

    /// Notes `op` while writes stream to replicas (built only then: a push
    /// copies its element).
    fn did(&mut self, ctx: &Ctx<'_>, op: impl FnOnce() -> ListOp) {
        if let Some(ops) = self.ops.as_mut().filter(|_| ctx.shared.master.streaming()) {
            ops.push(op());
        }
    }

    /// A new chunked table at `key` holding `elements` (a list grown past
    /// 8 KiB, a RESTORE, a COPY), stub included.
    pub fn create<'e>(
        ctx: &mut Ctx<'_>,
        key: &[u8],
        elements: impl Iterator<Item = &'e [u8]>,
        expiry: Option<u64>,
    ) -> CmdResult {
        let mut table = table::fill(ctx, key, TYPE_LIST_TABLE, std::iter::empty())?;
        table.layout = CHUNKED;
        let mut list = ChunkedList::new(table);
        // A new table: the replicas read it whole.
        list.ops = None;
        for element in elements {
            list.push(ctx, false, element)?;
        }
        list.store(ctx, key, expiry)
    }

    /// For a reader without locks: reads the stub at `key` again from a
    /// snapshot, which the reads after it use too. When the key holds
    /// something else there (it changed since it was read), that instead:
    /// its value, type byte first, or None when it is gone.
    pub fn pin<'a: 's>(&mut self, ctx: &Ctx<'a>, key: &[u8]) -> Result<Option<Option<Vec<u8>>>, CmdError> {
        let shared: &'a crate::server::Shared = ctx.shared;
        let snapshot = shared.db.snapshot();
        let stub = match snapshot.get(key)? {
            Some(stub) if stub.first() == Some(&TYPE_LIST_TABLE) => stub,
            other => return Ok(Some(other)),
        };
        let table = Table::decode(stub[0], &stub[1..])?;
        if table.layout != CHUNKED {
            return Ok(Some(Some(stub)));
        }
        self.table = table;
        self.snapshot = Some(snapshot);
        Ok(None)
    }

    /// The entry at `key`, without its type byte.
    fn read(&self, source: Source<'_>, key: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
        match &self.snapshot {
            Some(snapshot) => Ok(snapshot.get(key)?.map(|mut bytes| {
                bytes.remove(0);
                bytes
            })),
            None => Ok(source.0.get_internal(source.1, key)?.map(Value::into_data)),
        }
    }

    fn read_spilled(&self, source: Source<'_>, chunk: i64, slot: usize) -> Result<Vec<u8>, CmdError> {
        Ok(self.read(source, &spill_key(self.table.id, chunk, slot))?.ok_or(Corrupt)?)
    }

    fn chunk(&mut self, source: Source<'_>, at: i64) -> Result<&mut Chunk, CmdError> {
        if !self.chunks.contains_key(&at) {
            let chunk = match self.read(source, &chunk_key(self.table.id, at))? {
                Some(data) => Chunk { read: data, slots: None, stored: true, dirty: false },
                None => Chunk { read: Vec::new(), slots: None, stored: false, dirty: false },
            };
            self.chunks.insert(at, chunk);
        }
        Ok(self.chunks.get_mut(&at).expect("inserted above"))
    }

    pub fn len(&self) -> usize {
        self.table.count as usize
    }

    fn position(&self, index: usize) -> i64 {
        self.table.head + index as i64
    }

    /// The element at `index` (within the list).
    pub fn get(&mut self, ctx: &Ctx<'_>, index: usize) -> Result<Vec<u8>, CmdError> {
        let (at, slot) = split(self.position(index));
        let chunk = self.chunk(source_of(ctx), at)?;
        chunk.slots()?;
        let slots = chunk.slots.as_ref().expect("decoded");
        match slots[slot].as_ref().ok_or(Corrupt)?.bytes(&chunk.read) {
            Some(element) => Ok(element.to_vec()),
            None => self.read_spilled(source_of(ctx), at, slot),
        }
    }

    /// Puts `element` at `position` (a free one).
    fn place(&mut self, ctx: &mut Ctx<'_>, position: i64, element: &[u8]) -> CmdResult {
        let (at, slot) = split(position);
        let placed = if element.len() > SPILL_BYTES {
            ctx.writes.put_internal(&spill_key(self.table.id, at, slot), TYPE_FIELD, element, None)?;
            ctx.writes.note_reserved(1);
            Slot::Spilled(Some(element.to_vec()))
        } else {
            Slot::Inline(element.to_vec())
        };
        let chunk = self.chunk(source_of(ctx), at)?;
        chunk.dirty = true;
        if !chunk.place_at_end(slot, &placed)? {
            chunk.slots()?[slot] = Some(placed);
        }
        Ok(())
    }

    /// Takes the element at `position` out; its bytes if `wanted`.
    fn take(&mut self, ctx: &mut Ctx<'_>, position: i64, wanted: bool) -> Result<Vec<u8>, CmdError> {
        let (at, slot) = split(position);
        let chunk = self.chunk(source_of(ctx), at)?;
        chunk.dirty = true;
        let taken = match chunk.take_at_end(slot, wanted)? {
            Some((element, false)) => return Ok(element),
            Some((_, true)) => Slot::Spilled(None),
            None => chunk.slots()?[slot].take().ok_or(Corrupt)?,
        };
        match taken {
            Slot::Read(at) => Ok(if wanted { chunk.read[at].to_vec() } else { Vec::new() }),
            Slot::Inline(element) => Ok(element),
            Slot::Spilled(known) => {
                let element = match known {
                    Some(element) => element,
                    None if wanted => self.read_spilled(source_of(ctx), at, slot)?,
                    None => Vec::new(),
                };
                ctx.writes.delete(&spill_key(self.table.id, at, slot));
                ctx.writes.note_reserved(-1);
                Ok(element)
            }
        }
    }

    pub fn push(&mut self, ctx: &mut Ctx<'_>, front: bool, element: &[u8]) -> CmdResult {
        let position = if front { self.table.head - 1 } else { self.position(self.len()) };
        self.place(ctx, position, element)?;
        if front {
            self.table.head -= 1;
        }
        self.table.count += 1;
        self.did(ctx, || ListOp::Push { front, element: element.to_vec() });
        Ok(())
    }

    pub fn pop(&mut self, ctx: &mut Ctx<'_>, front: bool) -> Result<Option<Vec<u8>>, CmdError> {
        if self.len() == 0 {
            return Ok(None);
        }
        let position = if front { self.table.head } else { self.position(self.len() - 1) };
        let element = self.take(ctx, position, true)?;
        self.table.count -= 1;
        if front {
            self.table.head += 1;
        }
        self.did(ctx, || ListOp::Pop { front });
        Ok(Some(element))
    }

    pub fn set(&mut self, ctx: &mut Ctx<'_>, index: usize, element: &[u8]) -> CmdResult {
        let position = self.position(index);
        self.take(ctx, position, false)?;
        self.place(ctx, position, element)?;
        self.did(ctx, || ListOp::Set { index, element: element.to_vec() });
        Ok(())
    }

    /// Keeps the elements `start..start + n` only.
    pub fn trim(&mut self, ctx: &mut Ctx<'_>, start: usize, n: usize) -> CmdResult {
        for index in (0..start).chain(start + n..self.len()) {
            self.take(ctx, self.position(index), false)?;
        }
        self.table.head += start as i64;
        self.table.count = n as u64;
        self.did(ctx, || ListOp::Trim { start, n });
        Ok(())
    }

    /// Replaces every element.
    pub fn replace(&mut self, ctx: &mut Ctx<'_>, elements: &[Vec<u8>]) -> CmdResult {
        // Said as the whole list, not as its pushes (the replicas read it).
        self.ops = None;
        self.trim(ctx, 0, 0)?;
        for element in elements {
            self.push(ctx, false, element)?;
        }
        Ok(())
    }

    /// Replaces every element with what `op` (an LREM's or LINSERT's)
    /// made of them: said as `op`, which a replica does again.
    pub fn replace_as(&mut self, ctx: &mut Ctx<'_>, elements: &[Vec<u8>], op: impl FnOnce() -> ListOp) -> CmdResult {
        let ops = self.ops.take();
        self.replace(ctx, elements)?;
        self.ops = ops;
        self.did(ctx, op);
        Ok(())
    }

    /// Calls `visit` with the elements `first..first + n` (within the
    /// list) in order, lent from their chunks where the command has not
    /// read them yet.
    pub fn visit(
        &mut self,
        writes: &Writes,
        db: &scaledkv::Db,
        first: usize,
        n: usize,
        mut visit: impl FnMut(&[u8]),
    ) -> CmdResult {
        let source = (writes, db);
        let (mut position, end) = (self.position(first), self.position(first + n));
        if position >= end {
            return Ok(());
        }
        // A reader's snapshot gives its chunks in one walk of the index,
        // not a lookup each, and each chunk's spilled elements right after
        // it (their keys extend its key by their slot).
        let (first_chunk, last_chunk) = (split(position).0, split(end - 1).0);
        let mut held = Vec::new();
        let mut walk = match &self.snapshot {
            Some(snapshot) if self.chunks.is_empty() => {
                let (low, high) = (chunk_key(self.table.id, first_chunk), chunk_key(self.table.id, last_chunk + 1));
                // Entries: the chunks and at most an element each spilled.
                let entries = (last_chunk - first_chunk + 1) as usize + n;
                Some(snapshot.range(low.as_slice()..high.as_slice()).expect(entries))
            }
            _ => None,
        };
        while position < end {
            let (at, from) = split(position);
            let to = (end - at * SLOTS).min(SLOTS) as usize;
            if let Some(chunk) = self.chunks.get_mut(&at) {
                chunk.slots()?;
            }
            if let Some(chunk) = self.chunks.get(&at) {
                let slots = chunk.slots.as_ref().expect("decoded");
                for (slot, held) in slots.iter().enumerate().take(to).skip(from) {
                    match held.as_ref().ok_or(Corrupt)?.bytes(&chunk.read) {
                        Some(element) => visit(element),
                        None => visit(&self.read_spilled(source, at, slot)?),
                    }
                }
            } else {
                let key = chunk_key(self.table.id, at);
                let data = match &mut walk {
                    Some(walk) => {
                        // Copied: the walk goes on to the spilled elements.
                        let value = loop {
                            let (found, value) = walk.next_ref().ok_or(Corrupt)??;
                            if found.len() == key.len() {
                                if found != key {
                                    return Err(Corrupt.into());
                                }
                                break value.get(1..).ok_or(Corrupt)?;
                            }
                        };
                        held.clear();
                        held.extend_from_slice(value);
                        &held[..]
                    }
                    None => {
                        held = self.read(source, &key)?.ok_or(Corrupt)?;
                        &held[..]
                    }
                };
                let mut next = from;
                for entry in entries(data)? {
                    let (slot, element) = entry?;
                    if slot < from {
                        continue;
                    }
                    if slot >= to {
                        break;
                    }
                    if slot != next {
                        return Err(Corrupt.into());
                    }
                    match (element, &mut walk) {
                        (Some(element), _) => visit(element),
                        (None, Some(walk)) => visit(spilled_in(walk, &key, slot)?),
                        (None, None) => visit(&self.read_spilled(source, at, slot)?),
                    }
                    next += 1;
                }
                if next != to {
                    return Err(Corrupt.into());
                }
            }
            position = at * SLOTS + to as i64;
        }
        Ok(())
    }

    /// `n` elements from `first`, copied.
    pub fn range(&mut self, ctx: &Ctx<'_>, first: usize, n: usize) -> Result<Vec<Vec<u8>>, CmdError> {
        let mut elements = Vec::with_capacity(n);
        self.visit(ctx.writes, &ctx.shared.db, first, n, |element| elements.push(element.to_vec()))?;
        Ok(elements)
    }

    /// Writes the changed chunks and the stub back to `key` with `expiry`;
    /// an empty list goes.
    pub fn store(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>) -> CmdResult {
        if ctx.shared.master.streaming() && self.ops.as_ref().is_none_or(|ops| !ops.is_empty()) {
            ctx.writes.note_list_ops(self.table.id, self.ops);
        }
        for (at, chunk) in self.chunks {
            if !chunk.dirty {
                continue;
            }
            let key = chunk_key(self.table.id, at);
            let stored = chunk.stored;
            match chunk.encoded() {
                Some(data) => {
                    ctx.writes.put_internal(&key, TYPE_FIELD, &data, None)?;
                    if !stored {
                        ctx.writes.note_reserved(1);
                    }
                }
                None if stored => {
                    ctx.writes.delete(&key);
                    ctx.writes.note_reserved(-1);
                }
                None => {}
            }
        }
        table::store(ctx, key, &self.table, expiry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_reads_back_as_written() {
        let mut slots = empty_slots();
        slots[3] = Some(Slot::Inline(b"a".to_vec()));
        slots[4] = Some(Slot::Spilled(Some(vec![7; 100])));
        slots[5] = Some(Slot::Inline(Vec::new()));
        let data = encode(&slots, &[]).unwrap();
        let got: Vec<(usize, Option<Vec<u8>>)> =
            entries(&data).unwrap().map(|e| e.map(|(s, e)| (s, e.map(<[u8]>::to_vec))).unwrap()).collect();
        assert_eq!(got, vec![(3, Some(b"a".to_vec())), (4, None), (5, Some(Vec::new()))]);
        let back = decode(&data).unwrap();
        assert_eq!(back[3].as_ref().unwrap().bytes(&data), Some(&b"a"[..]));
        assert!(matches!(&back[4], Some(Slot::Spilled(None))));
        assert_eq!(back[5].as_ref().unwrap().bytes(&data), Some(&b""[..]));
        assert!(back[..3].iter().chain(&back[6..]).all(Option::is_none));
        assert_eq!(encode(&back, &data), Some(data), "read slots write back the same");
        assert_eq!(encode(&empty_slots(), &[]), None);
    }

    #[test]
    fn damaged_chunks_are_errors() {
        assert!(decode(&[]).is_err());
        let mut slots = empty_slots();
        slots[31] = Some(Slot::Inline(b"x".to_vec()));
        slots[30] = Some(Slot::Inline(b"y".to_vec()));
        let mut data = encode(&slots, &[]).unwrap();
        data[0] = 31; // two elements from the last slot on
        assert!(decode(&data).is_err());
    }

    proptest::proptest! {
        /// Damaged chunk bytes are an error or some slots, never a panic,
        /// and what decodes encodes back to the same bytes.
        #[test]
        fn any_bytes_decode_or_fail_cleanly(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok(slots) = decode(&data) {
                if let Some(again) = encode(&slots, &data) {
                    let back = decode(&again).unwrap();
                    proptest::prop_assert_eq!(encode(&back, &again), Some(again));
                }
            }
        }
    }

    /// An element as a chunk holds it: long ones spilled.
    fn slot_for(element: &[u8]) -> Slot {
        if element.len() > SPILL_BYTES {
            Slot::Spilled(Some(element.to_vec()))
        } else {
            Slot::Inline(element.to_vec())
        }
    }

    proptest::proptest! {
        /// Pushes and pops at a chunk's ends made on its bytes give the
        /// bytes, elements and spills that decoding it and encoding it
        /// again gives.
        #[test]
        fn changes_at_the_ends_match_a_decoded_chunk(
            first in 0usize..32,
            elements in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..80), 0..32),
            ops in proptest::collection::vec((0u8..4, proptest::collection::vec(0u8..4, 0..80)), 0..64),
        ) {
            let mut slots = empty_slots();
            let mut model = std::collections::VecDeque::new();
            for (i, element) in elements.iter().enumerate().take(SLOTS as usize - first) {
                slots[first + i] = Some(slot_for(element));
                model.push_back(element.len() > SPILL_BYTES);
            }
            let start = encode(&slots, &[]).unwrap_or_default();
            let mut raw = Chunk { read: start.clone(), slots: None, stored: true, dirty: false };
            let mut decoded = Chunk { read: start.clone(), slots: None, stored: true, dirty: false };
            decoded.slots().unwrap();
            let mut head = first;
            for (op, element) in ops {
                let (front, push) = (op & 1 == 0, op & 2 == 0);
                if push {
                    let slot = if front { head.wrapping_sub(1) } else { head + model.len() };
                    if slot >= SLOTS as usize || model.is_empty() && front {
                        continue;
                    }
                    proptest::prop_assert!(raw.place_at_end(slot, &slot_for(&element)).unwrap());
                    decoded.slots().unwrap()[slot] = Some(slot_for(&element));
                    let spilled = element.len() > SPILL_BYTES;
                    if front {
                        head -= 1;
                        model.push_front(spilled);
                    } else {
                        model.push_back(spilled);
                    }
                } else if let Some(spilled) = if front { model.pop_front() } else { model.pop_back() } {
                    let slot = if front { head } else { head + model.len() };
                    let (taken, was_spilled) = raw.take_at_end(slot, true).unwrap().expect("an end");
                    proptest::prop_assert_eq!(was_spilled, spilled);
                    let read = decoded.read.clone();
                    let expected = match decoded.slots().unwrap()[slot].take().expect("held") {
                        Slot::Read(at) => read[at].to_vec(),
                        Slot::Inline(element) => element,
                        Slot::Spilled(_) => Vec::new(),
                    };
                    proptest::prop_assert_eq!(taken, expected);
                    if front {
                        head += 1;
                    }
                }
                if model.is_empty() {
                    // An emptied chunk's next element may go to any slot.
                    head = first;
                }
            }
            proptest::prop_assert_eq!(raw.encoded(), decoded.encoded());
        }

        /// Damaged bytes give an error or a change, never a panic.
        #[test]
        fn damaged_bytes_change_at_the_ends_without_a_panic(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..120),
            slot in 0usize..32,
        ) {
            let mut chunk = Chunk { read: data.clone(), slots: None, stored: true, dirty: false };
            let _ = chunk.take_at_end(slot, true);
            let mut chunk = Chunk { read: data, slots: None, stored: true, dirty: false };
            let _ = chunk.place_at_end(slot, &Slot::Inline(b"x".to_vec()));
        }
    }

    #[test]
    fn positions_split_into_chunks_below_zero_too() {
        assert_eq!(split(0), (0, 0));
        assert_eq!(split(33), (1, 1));
        assert_eq!(split(-1), (-1, 31));
        assert_eq!(split(-32), (-1, 0));
        assert_eq!(split(-33), (-2, 31));
    }
}
