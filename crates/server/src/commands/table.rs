//! Big collections as tables. Redis keeps a hash past its listpack limits
//! in a hash table, and a set past its intset limits likewise; ScaledKV
//! gives each field (or member) of such a collection past 8 KiB an engine
//! entry of its own, so a write costs one field, not the whole collection.
//!
//! The client's key holds a stub (type `TYPE_HASH_TABLE` or
//! `TYPE_SET_TABLE`): the table's id and field count, and the collection's
//! expiry time. Under the server's reserved keys (`keyspace::RESERVED`)
//! live
//! - `RESERVED 01 id field` → the field's value (empty for a set), one per
//!   field;
//! - `RESERVED 02 id` → the key that holds the stub (its owner).
//!
//! Every change to a table (fields, count, owner) is in the command's one
//! batch, so a crash leaves a table whole. A stub that goes away without
//! its fields (DEL, an overwrite, expiry, FLUSHALL of a crashed half) leaves
//! them behind: `sweep` finds such tables by their owner records and
//! deletes them, as Redis frees a big value in the background (UNLINK).

use std::sync::atomic::Ordering;

use super::{err, CmdError, CmdResult, Ctx};
use crate::hash::Corrupt;
use crate::keyspace::{is_table, Entries, KeyLocks, Ready, Writes, RESERVED};
use crate::server::Shared;

/// Up to this many bytes a collection stays one value even past Redis's
/// limits for its compact encodings: rewriting 8 KiB costs a few
/// microseconds, less than the index updates of a table's entries (a YCSB
/// record, 10 fields of 100 bytes, as a table: HSET of all ten at 0.35x
/// Redis's rate).
const VALUE_BYTES: usize = 8 << 10;

/// Whether a collection stays one value: Redis keeps it compact (so it
/// lists its elements in the order Redis does), or it is small. OBJECT
/// ENCODING still answers by Redis's limits alone.
pub fn stays_one_value(past_redis_limits: bool, encoded: usize) -> bool {
    encoded <= VALUE_BYTES || !past_redis_limits
}

const MEMBERS: u8 = 0x01;
const OWNERS: u8 = 0x02;
/// The type byte of a field's value (`Value::data` strips the first byte).
pub const TYPE_FIELD: u8 = 0x01;

/// A table's stub: its type, its id, how many fields it holds, and a third
/// word: a list's position of its first element (`commands::lists`), a
/// sorted set's member count (`commands::zsets`). A list's stub may have a
/// fourth word, its layout (`commands::list_chunks`); without it a list
/// has one entry per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub tag: u8,
    pub id: u64,
    pub count: u64,
    pub head: i64,
    pub layout: u64,
    /// The count, third word and expiry time of the stub as the command
    /// read it (`Table::of`): `store` writes nothing when they are still
    /// so. None for a table not read from its key.
    read_as: Option<(u64, i64, Option<u64>)>,
}

impl Table {
    /// The stub of a value of type `tag` (one of the table types).
    pub fn decode(tag: u8, data: &[u8]) -> Result<Table, Corrupt> {
        let word = |at: usize| -> Result<[u8; 8], Corrupt> {
            data.get(at..at + 8).and_then(|w| w.try_into().ok()).ok_or(Corrupt)
        };
        let (head, layout) = match data.len() {
            16 => (0, 0),
            24 => (i64::from_le_bytes(word(16)?), 0),
            32 => (i64::from_le_bytes(word(16)?), u64::from_le_bytes(word(24)?)),
            // A stream's stub: its metadata follows (`crate::stream::Meta`).
            n if tag == crate::keyspace::TYPE_STREAM_TABLE && n > 16 => (0, 0),
            _ => return Err(Corrupt),
        };
        let (id, count) = (u64::from_le_bytes(word(0)?), u64::from_le_bytes(word(8)?));
        Ok(Table { tag, id, count, head, layout, read_as: None })
    }

    /// The stub `value` holds, as read.
    pub fn of(value: &crate::keyspace::Value) -> Result<Table, Corrupt> {
        let table = Table::decode(value.tag(), value.data())?;
        Ok(Table { read_as: Some((table.count, table.head, value.expiry_ms())), ..table })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        if matches!(self.tag, crate::keyspace::TYPE_LIST_TABLE | crate::keyspace::TYPE_ZSET_TABLE) {
            out.extend_from_slice(&self.head.to_le_bytes());
        }
        if self.layout != 0 {
            out.extend_from_slice(&self.layout.to_le_bytes());
        }
        out
    }
}

/// Where the fields of table `id` sort, field by field.
pub fn members_prefix(id: u64) -> Vec<u8> {
    members_prefix_with_room(id, 0)
}

/// The prefix, in a vector with room for `room` bytes more.
fn members_prefix_with_room(id: u64, room: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(RESERVED.len() + 1 + 8 + room);
    key.extend_from_slice(RESERVED);
    key.push(MEMBERS);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

pub fn member_key(id: u64, field: &[u8]) -> Vec<u8> {
    // Allocated once: growing the prefix's vector by the field was 3% of
    // a pipelined LPUSH's CPU.
    let mut key = members_prefix_with_room(id, field.len());
    key.extend_from_slice(field);
    key
}

/// The table id and field of a field's engine key (`member_key`); None
/// for another key.
pub fn split_member_key(key: &[u8]) -> Option<(u64, &[u8])> {
    let rest = key.strip_prefix(RESERVED)?.strip_prefix(&[MEMBERS])?;
    let (id, field) = rest.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*id), field))
}

fn owners_prefix() -> Vec<u8> {
    [RESERVED, &[OWNERS]].concat()
}

fn owner_key(id: u64) -> Vec<u8> {
    [RESERVED, &[OWNERS], &id.to_be_bytes()].concat()
}

/// The id the next table gets: one past the highest owner record (a table
/// whose owner record is gone has no fields left either).
pub fn next_id(db: &scaledkv::Db) -> Result<u64, String> {
    let prefix = owners_prefix();
    let end = crate::keyspace::prefix_end(&prefix).expect("ends below 0xFF");
    match db.range_rev::<&[u8], _>(prefix.as_slice()..end.as_slice()).next() {
        Some(item) => {
            let (key, _) = item.map_err(|e| e.to_string())?;
            let id: [u8; 8] = key.get(prefix.len()..).and_then(|id| id.try_into().ok()).ok_or("a bad owner record")?;
            Ok(u64::from_be_bytes(id) + 1)
        }
        None => Ok(1),
    }
}

pub fn get(ctx: &mut Ctx<'_>, table: &Table, field: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    Ok(ctx.writes.get_internal(ctx.db(), &member_key(table.id, field))?.map(|value| value.data().to_vec()))
}

/// Sets `field`; true if it is new.
pub fn set(ctx: &mut Ctx<'_>, table: &mut Table, field: &[u8], value: &[u8]) -> Result<bool, CmdError> {
    let key = member_key(table.id, field);
    check_field(&key)?;
    // A field set twice in one command (HSET k f 1 f 2) must read its
    // first write to count it once.
    ctx.writes.keep_overlay();
    let found = ctx.writes.get_internal(ctx.db(), &key)?;
    let new = found.is_none();
    // A field holding this value already (an SADD of a member already
    // there, an HSET of the same value) changes nothing: no write, none to
    // make durable nor for the replicas (SADD's tells them of none).
    if found.is_some_and(|found| found.tag() == TYPE_FIELD && found.data() == value && found.expiry_ms().is_none()) {
        return Ok(false);
    }
    ctx.writes.put_internal(&key, TYPE_FIELD, value, None)?;
    if new {
        table.count += 1;
        ctx.writes.note_reserved(1);
    }
    Ok(new)
}

/// Removes `field`; true if it was there.
pub fn remove(ctx: &mut Ctx<'_>, table: &mut Table, field: &[u8]) -> Result<bool, CmdError> {
    let key = member_key(table.id, field);
    ctx.writes.keep_overlay();
    if ctx.writes.get_internal(ctx.db(), &key)?.is_none() {
        return Ok(false);
    }
    ctx.writes.delete(&key);
    table.count -= 1;
    ctx.writes.note_reserved(-1);
    Ok(true)
}

/// A field's engine key must fit the engine's key limit.
pub fn check_field(key: &[u8]) -> CmdResult {
    check_field_len(key.len().saturating_sub(members_prefix(0).len()))
}

/// As `check_field`, for a field of `len` bytes: a command that commits
/// in pieces (`piece_point`) checks its fields before its first write, so
/// that it never fails half done.
pub fn check_field_len(len: usize) -> CmdResult {
    let most = scaledkv::MAX_KEY_BYTES - members_prefix(0).len();
    if len > most {
        return Err(err(format!("ERR field is too large (max {most} bytes in a big collection)")));
    }
    Ok(())
}

/// Where a command's writes to `table` (at `key`, expiring at `expiry`)
/// are a whole state of it: once they pass a piece (`Writes::piece_due`;
/// `pieces`: `Writes::may_commit_in_pieces` held before its first write)
/// they are committed now, with the stub as it stands, so a change of
/// any size fits and a crash leaves the collection as a smaller change
/// would (in a pipeline's run the command leaves it to run alone,
/// `CmdError::RunAlone`). A table that is left empty waits for the
/// command's last batch, where `store` deletes it.
pub fn piece_point(ctx: &mut Ctx<'_>, key: &[u8], table: &mut Table, expiry: Option<u64>, pieces: bool) -> CmdResult {
    // A sorted set's stub counts its members in the third word (its count
    // includes the rank blocks, the first of which stays while any
    // member does).
    let empty = match table.tag {
        crate::keyspace::TYPE_ZSET_TABLE => table.head == 0,
        _ => table.count == 0,
    };
    if !empty && ctx.writes.piece_due(ctx.db(), pieces)? {
        store(ctx, key, table, expiry)?;
        ctx.writes.commit_piece(ctx.shared)?;
        // The stub is now as stored: `store` compares with it.
        table.read_as = Some((table.count, table.head, expiry));
    }
    Ok(())
}

/// Writes the stub back; a table left empty goes, with its owner record,
/// as Redis deletes an empty hash.
pub fn store(ctx: &mut Ctx<'_>, key: &[u8], table: &Table, expiry: Option<u64>) -> CmdResult {
    written(ctx, table);
    if table.count == 0 {
        ctx.writes.delete(key);
        ctx.writes.delete(&owner_key(table.id));
        ctx.writes.note_reserved(-1);
        return Ok(());
    }
    // An update of fields a table holds leaves its stub as it was read:
    // no new record in the log (each would be garbage for GC to skip).
    if table.read_as == Some((table.count, table.head, expiry)) {
        return Ok(());
    }
    ctx.writes.put(key, table.tag, &table.encode(), expiry)
}

/// A new table of type `tag` at `key` holding `pairs` (a collection grown
/// past its limits, a RESTORE, a COPY).
pub fn create<'p>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    tag: u8,
    pairs: impl Iterator<Item = (&'p [u8], &'p [u8])>,
    expiry: Option<u64>,
) -> CmdResult {
    let table = fill(ctx, key, tag, pairs)?;
    store(ctx, key, &table, expiry)
}

/// A new table's entries and owner record, without its stub (which its
/// command writes once done).
pub fn fill<'p>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    tag: u8,
    pairs: impl Iterator<Item = (&'p [u8], &'p [u8])>,
) -> Result<Table, CmdError> {
    let id = ctx.shared.next_table_id.fetch_add(1, Ordering::Relaxed);
    let mut table = Table { tag, id, count: 0, head: 0, layout: 0, read_as: None };
    written(ctx, &table);
    // Later writes of the command may read these (a sorted set's first
    // rank block): writes of a command run alone are not tracked unless
    // kept from before they are written.
    ctx.writes.keep_overlay();
    // The owner record first: a table too big for one batch is written
    // ahead of its stub (`commands::commit_batch`), and a crash in between
    // leaves no field without its owner (the sweep drops the table, and
    // its id is never handed out again).
    ctx.writes.put_internal(&owner_key(id), TYPE_FIELD, key, None)?;
    ctx.writes.note_new_table(id);
    for (field, value) in pairs {
        let member = member_key(id, field);
        check_field(&member)?;
        ctx.writes.put_internal(&member, TYPE_FIELD, value, None)?;
        table.count += 1;
    }
    ctx.writes.note_reserved(table.count as i64 + 1);
    Ok(table)
}

/// Adds `field`, known to be new (no read to find out).
pub fn insert(ctx: &mut Ctx<'_>, table: &mut Table, field: &[u8], value: &[u8]) -> CmdResult {
    overwrite(ctx, table, field, value)?;
    table.count += 1;
    ctx.writes.note_reserved(1);
    Ok(())
}

/// Replaces the value of `field`, known to be there.
pub fn overwrite(ctx: &mut Ctx<'_>, table: &Table, field: &[u8], value: &[u8]) -> CmdResult {
    written(ctx, table);
    let key = member_key(table.id, field);
    check_field(&key)?;
    // A later read in the same command must find it.
    ctx.writes.keep_overlay();
    ctx.writes.put_internal(&key, TYPE_FIELD, value, None)
}

/// Removes `field`, known to be there.
pub fn delete(ctx: &mut Ctx<'_>, table: &mut Table, field: &[u8]) {
    written(ctx, table);
    ctx.writes.keep_overlay();
    ctx.writes.delete(&member_key(table.id, field));
    table.count -= 1;
    ctx.writes.note_reserved(-1);
}

/// Notes a write to a sorted set's, a set's or a hash's table: readers
/// without locks re-check what they read of a sorted set (`ranks.rs`),
/// and random picks read a table's fences again after enough writes
/// (`picks.rs`).
fn written(ctx: &mut Ctx<'_>, table: &Table) {
    use crate::keyspace::{TYPE_HASH_TABLE, TYPE_SET_TABLE, TYPE_ZSET_TABLE};
    if matches!(table.tag, TYPE_ZSET_TABLE | TYPE_SET_TABLE | TYPE_HASH_TABLE) {
        ctx.writes.note_table_written(table.id);
    }
}

/// Records `key` as the owner of `table` (RENAME moved its stub there).
pub fn moved(writes: &mut Writes, key: &[u8], table: &Table) -> CmdResult {
    writes.put_internal(&owner_key(table.id), TYPE_FIELD, key, None)
}

/// Up to `limit` (field, value) pairs after the field `after`, in field
/// order.
pub fn entries(ctx: &mut Ctx<'_>, table: &Table, after: Option<&[u8]>, limit: usize) -> Result<Entries, CmdError> {
    let prefix = members_prefix(table.id);
    let after = after.map(|field| member_key(table.id, field));
    let found = ctx.writes.scan_internal(ctx.db(), &prefix, after.as_deref(), limit)?;
    Ok(found.into_iter().map(|(key, value)| (key[prefix.len()..].to_vec(), value)).collect())
}

/// A SCAN-family page of a table's fields that start with `under` (given
/// without it): up to `count` after the one `cursor` stands for (0: from
/// the start), and the cursor that stands for the last of them (0 when the
/// table is done).
pub fn page(
    ctx: &mut Ctx<'_>,
    table: &Table,
    under: &[u8],
    cursor: u64,
    count: usize,
) -> Result<(u64, Entries), CmdError> {
    let after = match cursor {
        0 => None,
        n => Some(ctx.shared.cursors.lock().get(n).ok_or_else(|| err("ERR invalid cursor"))?),
    };
    let prefix = [&members_prefix(table.id), under].concat();
    let after = after.map(|field| [&prefix, &field[..]].concat());
    let found = ctx.writes.scan_internal(ctx.db(), &prefix, after.as_deref(), count)?;
    let page: Entries = found.into_iter().map(|(key, value)| (key[prefix.len()..].to_vec(), value)).collect();
    let next = match page.last() {
        Some((field, _)) if page.len() == count => ctx.shared.cursors.lock().insert(field.clone()),
        _ => 0,
    };
    Ok((next, page))
}

/// Table ids `sweeper` checks per step, and the pause after a step that
/// found few orphans: ids are handed out in order, so a pass probes every
/// id given so far with point reads (10,000 per step, a few milliseconds),
/// never an iterator: making one every 100 ms had the index merge its
/// pending updates each time, which doubled SET's p99 at `-P 1` (0.58-0.70
/// against 0.98-1.58 ms).
const SWEEP_STEP: u64 = 10_000;
const SWEEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `sweep` a step at a time until shutdown, going on at once while a
/// step finds many orphans; idle while the database holds no table.
pub async fn sweeper(shared: std::sync::Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut next_id = 1;
    loop {
        let mut busy = false;
        // The format marker alone: no table to look at.
        if shared.reserved_entries.load(Ordering::Relaxed) > 1 {
            match sweep(&shared, next_id, SWEEP_STEP).await {
                Ok((next, orphans)) => {
                    busy = orphans * 4 > SWEEP_STEP;
                    next_id = next;
                }
                Err(error) => {
                    tracing::warn!(error = %error.text(), "sweeping the fields of deleted big collections failed")
                }
            }
        }
        if busy {
            tokio::task::yield_now().await;
            continue;
        }
        // A pass done: rest longer before the next.
        let pause = if next_id == 1 { SWEEP_PAUSE * 10 } else { SWEEP_PAUSE };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Checks the owner records of up to `step` table ids from `from` and
/// deletes the fields of tables whose stubs are gone; returns the id to go
/// on from (back to 1 after the last id handed out) and how many tables
/// went. Each owner record is checked under its key's lock, after reading
/// it again there: RENAME changes the owner and the stub together under
/// the locks of both keys.
pub async fn sweep(shared: &Shared, from: u64, step: u64) -> Result<(u64, u64), CmdError> {
    let end = shared.next_table_id.load(Ordering::Relaxed);
    let to = from.saturating_add(step).min(end);
    let mut orphans = 0;
    for id in from..to {
        let owner = owner_key(id);
        let Some(record) = shared.db.get(&owner)? else { continue };
        let Some(key) = record.get(1..) else { continue };
        let guard = shared.locks.lock(&[KeyLocks::stripe(key)]).await;
        // Writes of the key published but not yet in the engine
        // (`crate::pending`) are, after this.
        if !shared.pending.is_empty() {
            super::barrier(shared).await?;
        }
        let still = shared.db.get(&owner)?;
        if still.as_deref().and_then(|v| v.get(1..)) != Some(key) {
            continue;
        }
        let live = match shared.db.get(key)? {
            Some(stub) if stub.first().is_some_and(|&tag| is_table(tag)) => {
                Table::decode(stub[0], &stub[1..])?.id == id
            }
            _ => false,
        };
        drop(guard);
        if !live {
            drop_table(shared, id, &owner).await?;
            orphans += 1;
        }
    }
    Ok((if to >= end { 1 } else { to }, orphans))
}

/// Whether `key` is a field or the owner record of table `id`.
pub fn holds(id: u64, key: &[u8]) -> bool {
    let Some(rest) = key.strip_prefix(RESERVED) else { return false };
    matches!(rest.split_first(), Some((&(MEMBERS | OWNERS), rest)) if rest.starts_with(&id.to_be_bytes()))
}

/// Deletes an orphaned table's fields in batches of bounded size, then its
/// owner record, so a crash half-way leaves the owner for the next sweep.
async fn drop_table(shared: &Shared, id: u64, owner: &[u8]) -> Result<u64, CmdError> {
    const BATCH: usize = 4096;
    let prefix = members_prefix(id);
    let end = crate::keyspace::prefix_end(&prefix).expect("ends below 0xFF");
    let mut deleted = 0;
    loop {
        let keys: Vec<Vec<u8>> = shared
            .db
            .range::<&[u8], _>(prefix.as_slice()..end.as_slice())
            .take(BATCH)
            .map(|item| item.map(|(key, _)| key))
            .collect::<Result<_, _>>()?;
        let mut batch = scaledkv::WriteBatch::new();
        let last = keys.len() < BATCH;
        for key in &keys {
            batch.delete(key);
        }
        if last {
            batch.delete(owner);
        }
        let count = keys.len() as u64 + last as u64;
        // Readers of the sorted set it was see no half-dropped table.
        let ready = Ready {
            batch,
            reserved_delta: -(count as i64),
            written_tables: vec![id],
            writer: crate::keyspace::Writer::Server,
            ..Ready::default()
        };
        super::commit(shared, ready, &[], false, ()).await?;
        deleted += count;
        if last {
            return Ok(deleted);
        }
    }
}
