//! Keyspace notifications (`notify-keyspace-events`), as Redis has them: a
//! write publishes what it did to `__keyspace@0__:<key>` (the event's name)
//! and `__keyevent@0__:<event>` (the key's name), for the event classes
//! the setting names. Commands note their events in their writes
//! (`Ctx::notify`); they are published once those writes are durable and
//! visible, so a listener never hears of a write a crash could undo.

use std::sync::atomic::Ordering;

use crate::server::Shared;

/// `K`: publish to `__keyspace@0__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: publish to `__keyevent@0__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`, `s`, `h`, `z`: list, set, hash and sorted-set commands.
pub const LIST: u32 = 1 << 4;
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
/// `x`: a key removed because it expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key evicted (cache mode, `maxmemory::announce_evictions`).
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `d`: modules. Accepted and kept; ScaledKV has none.
pub const MODULE: u32 = 1 << 11;
/// `m`: a read's lookup found no key (`keymiss`; `Ctx::count_lookup`).
pub const MISS: u32 = 1 << 12;
/// `n`: a write added a key (`new`; `NewKeys`).
pub const NEW: u32 = 1 << 13;
/// `A`: every class but `m` and `n`.
const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

const CLASSES: [(char, u32); 12] = [
    ('g', GENERIC),
    ('$', STRING),
    ('l', LIST),
    ('s', SET),
    ('h', HASH),
    ('z', ZSET),
    ('x', EXPIRED),
    ('e', EVICTED),
    ('t', STREAM),
    ('d', MODULE),
    ('m', MISS),
    ('n', NEW),
];

/// The flags a `notify-keyspace-events` value sets; None for a character
/// that names no class.
pub fn parse(text: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &c in text {
        flags |= match c {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            _ => CLASSES.iter().find(|(name, _)| *name as u8 == c)?.1,
        };
    }
    Some(flags)
}

/// The setting as Redis 7.0 shows it: `A` for all of its classes, the
/// classes, then `K`, `E` and `m` (7.0 leaves `n` out).
pub fn format(flags: u32) -> String {
    let mut text = String::new();
    if flags & ALL == ALL {
        text.push('A');
    } else {
        text.extend(
            CLASSES.iter().filter(|(name, class)| flags & class != 0 && !"mn".contains(*name)).map(|(name, _)| name),
        );
    }
    for (name, flag) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', MISS)] {
        if flags & flag != 0 {
            text.push(name);
        }
    }
    text
}

/// Whether an event of `class` is published at all under `flags`.
pub fn wanted(flags: u32, class: u32) -> bool {
    flags & class != 0 && flags & (KEYSPACE | KEYEVENT) != 0
}

/// The keys a write may create, for Redis's `new` event (class `n`):
/// those it names that do not exist before it runs (`before_write`).
/// Redis notes `new` when it adds a key to its dictionary, before the
/// command's own event for it; RENAME, COPY and RESTORE delete an existing
/// destination and add it again, so theirs is new whenever they write it,
/// and RENAME adds it before it notes `rename_from`.
pub struct NewKeys {
    /// Each key, and for a replaced destination where the writes held its
    /// last entry before the command (`Writes::written_at`).
    keys: Vec<(bytes::Bytes, Option<Option<usize>>)>,
    first_event: usize,
    renames: bool,
}

/// The candidates for `new` of `command`, when class `n` is on and it
/// writes; if there are, its writes are tracked from now on, so that
/// `after_write` can read them.
pub fn before_write(
    shared: &Shared,
    writes: &mut crate::keyspace::Writes,
    command: &crate::commands::Command,
    args: &[bytes::Bytes],
) -> Option<NewKeys> {
    if !command.has(crate::commands::WRITE) || !wanted(shared.notify_flags.load(Ordering::Relaxed), NEW) {
        return None;
    }
    let replaced = match command.name {
        "rename" | "renamenx" | "copy" => args.get(2),
        "restore" | "restore-asking" => args.get(1),
        _ => None,
    };
    let mut keys: Vec<(bytes::Bytes, Option<Option<usize>>)> = Vec::new();
    for key in command.key_args(args).chain(replaced) {
        if keys.iter().any(|(held, _)| held == key) {
            continue;
        }
        if Some(key) == replaced {
            keys.push((key.clone(), Some(writes.written_at(key))));
        } else if matches!(writes.get(&shared.db, key), Ok(None)) {
            keys.push((key.clone(), None));
        }
    }
    if keys.is_empty() {
        return None;
    }
    // Not for a command without candidates: FLUSHALL splits a huge flush
    // only while its writes keep no overlay.
    writes.keep_overlay();
    let renames = matches!(command.name, "rename" | "renamenx");
    Some(NewKeys { keys, first_event: writes.events_len(), renames })
}

/// Notes `new` for each candidate the command (which succeeded) added:
/// before the command's first event for the key (for RENAME, before its
/// first event).
pub fn after_write(shared: &Shared, writes: &mut crate::keyspace::Writes, new: NewKeys, writer: u64) {
    for (key, replaced_at) in new.keys {
        // A replaced destination must be written by the command (RENAMENX
        // and COPY may write nothing).
        let written = replaced_at.is_none_or(|before| writes.written_at(&key) != before);
        if written && matches!(writes.get(&shared.db, &key), Ok(Some(_))) {
            let at = if new.renames { new.first_event } else { writes.first_event_of(new.first_event, &key) };
            writes.insert_event(at, Event { class: NEW, name: "new", key: key.to_vec(), writer });
        }
    }
}

/// Not a class of Redis's: a flush of every key, noted for client-side
/// caching (`crate::tracking`), never published.
pub const FLUSHED: u32 = 1 << 31;

/// Not a class of Redis's: a change Redis publishes no keyspace event
/// for (XACK, XCLAIM, XAUTOCLAIM, XREADGROUP's deliveries), noted only
/// while writes stream to replicas so that it reaches them
/// (`Ctx::note_unpublished`); never published, no invalidation.
pub const UNPUBLISHED: u32 = 1 << 30;

/// One event a command noted: its class, its name, the key, and the
/// client whose command it was (0: the server's own, active expiry).
pub struct Event {
    pub class: u32,
    pub name: &'static str,
    pub key: Vec<u8>,
    pub writer: u64,
}

/// Publishes `events` on the channels the setting asks for (the setting
/// may have changed since they were noted: it is read again), and sends
/// the invalidations they call for to clients that track keys.
pub fn publish(shared: &Shared, events: &[Event]) {
    let flags = shared.notify_flags.load(Ordering::Relaxed);
    let mut woken = Vec::new();
    let mut channel = Vec::new();
    for &Event { class, name, ref key, .. } in events {
        if !wanted(flags, class) {
            continue;
        }
        if flags & KEYSPACE != 0 {
            channel.clear();
            channel.extend_from_slice(b"__keyspace@0__:");
            channel.extend_from_slice(key);
            shared.pubsub.publish(&channel, name.as_bytes(), &mut woken);
        }
        if flags & KEYEVENT != 0 {
            channel.clear();
            channel.extend_from_slice(b"__keyevent@0__:");
            channel.extend_from_slice(name.as_bytes());
            shared.pubsub.publish(&channel, key, &mut woken);
        }
    }
    crate::pubsub::wake(&mut woken);
    if shared.tracking.active() {
        shared.tracking.invalidate(shared, events);
    }
    shared.master.note_loose(events, shared.replication.following());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings Redis 7.0.15 was seen to answer (CONFIG SET, then GET).
    #[test]
    fn settings_read_and_show_as_redis_shows_them() {
        for (set, shown) in [
            ("KEA", "AKE"),
            ("Kx", "xK"),
            ("Eg$", "g$E"),
            ("", ""),
            ("KEAmn", "AKEm"),
            ("Elshz", "lshzE"),
            ("Kg$lshzxetd", "AK"),
        ] {
            assert_eq!(format(parse(set.as_bytes()).unwrap()), shown, "{set}");
        }
        assert_eq!(parse(b"KQ"), None);
        assert!(wanted(parse(b"Eg").unwrap(), GENERIC));
        assert!(!wanted(parse(b"g").unwrap(), GENERIC), "neither K nor E");
        assert!(!wanted(parse(b"KE$").unwrap(), GENERIC));
    }
}
