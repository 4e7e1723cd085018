//! Client-side caching (CLIENT TRACKING), as Redis 7 has it. A client with
//! tracking on is told when a key it may have cached changes: in the
//! default mode, the keys its read-only commands named since they last
//! changed (the table here, key → client IDs, emptied for a key as it is
//! invalidated); in BCAST mode, every key under the prefixes it gave. The
//! message is a RESP3 push `invalidate [keys]` on its own connection, or
//! on the connection it redirects to: a push there in RESP3, in RESP2 a
//! message on `__redis__:invalidate` if that client is subscribed to
//! anything. A flush invalidates everything (a null instead of keys).
//!
//! Invalidations come from the events writes note (`notify::Event`), so
//! they are sent once the write is durable and visible, as keyspace
//! notifications are. A read names its keys in the table before it reads:
//! a write that commits after the read began then finds them, so a client
//! never keeps a value older than a change it was not told of.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use crate::commands::args::{eq, int};
use crate::commands::{err, CmdError, CmdResult, Command, Ctx, READONLY};
use crate::conn::{ClientInfo, ConnState};
use crate::notify::Event;
use crate::server::Shared;

/// Redis's `tracking-table-max-keys` default.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// A connection's tracking settings (CLIENT TRACKING ON's options).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The client that gets the invalidations (0: this one).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST's prefixes (an empty one: all keys).
    pub prefixes: Vec<Vec<u8>>,
    /// The redirect client was gone when a message was to go to it.
    pub broken_redirect: bool,
}

/// Who may have cached which keys.
pub struct Tracking {
    /// Connections with tracking on (none: reads and writes skip all this).
    clients: AtomicUsize,
    /// Key → the default-mode clients that read it since it last changed.
    table: Mutex<HashMap<Vec<u8>, SmallVec<[u64; 2]>>>,
    /// (client ID, key) pairs in the table.
    items: AtomicUsize,
    /// BCAST clients: (prefix, client ID).
    prefixes: RwLock<Vec<(Vec<u8>, u64)>>,
    /// `tracking-table-max-keys` (0: no limit): past it, keys are
    /// invalidated to make room.
    pub max_keys: AtomicUsize,
}

impl Default for Tracking {
    fn default() -> Tracking {
        Tracking {
            clients: AtomicUsize::new(0),
            table: Mutex::new(HashMap::new()),
            items: AtomicUsize::new(0),
            prefixes: RwLock::new(Vec::new()),
            max_keys: AtomicUsize::new(DEFAULT_MAX_KEYS),
        }
    }
}

impl Tracking {
    /// Whether any client tracks keys.
    pub fn active(&self) -> bool {
        self.clients.load(Ordering::Relaxed) > 0
    }

    /// INFO's `tracking_clients`.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// INFO's `tracking_total_keys`, `tracking_total_items`,
    /// `tracking_total_prefixes`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let keys = self.table.lock().len();
        let mut prefixes: Vec<&[u8]> = Vec::new();
        let registered = self.prefixes.read();
        for (prefix, _) in registered.iter() {
            if !prefixes.contains(&&prefix[..]) {
                prefixes.push(prefix);
            }
        }
        (keys, self.items.load(Ordering::Relaxed), prefixes.len())
    }

    /// Turns tracking on for `client` (or changes its settings).
    pub fn enable(&self, client: &ClientInfo, settings: Settings) {
        let mut current = client.tracking.lock();
        match current.take() {
            Some(old) => self.drop_prefixes(client.id, &old),
            None => {
                self.clients.fetch_add(1, Ordering::Relaxed);
            }
        }
        if settings.bcast {
            let mut prefixes = self.prefixes.write();
            prefixes.extend(settings.prefixes.iter().map(|prefix| (prefix.clone(), client.id)));
        }
        *current = Some(settings);
    }

    /// Turns tracking off for `client` (CLIENT TRACKING OFF, RESET, the
    /// connection closing). Its keys stay in the table until they change;
    /// nothing is sent for them then.
    pub fn disable(&self, client: &ClientInfo) {
        if let Some(old) = client.tracking.lock().take() {
            self.drop_prefixes(client.id, &old);
            self.clients.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn drop_prefixes(&self, id: u64, settings: &Settings) {
        if settings.bcast {
            self.prefixes.write().retain(|(_, client)| *client != id);
        }
    }

    /// Notes that `client` may cache `keys` (it is about to read them).
    pub fn remember<'k>(&self, shared: &Shared, client: u64, keys: impl Iterator<Item = &'k Bytes>) {
        let mut table = self.table.lock();
        for key in keys {
            // The key is copied only the first time it is tracked.
            match table.get_mut(&key[..]) {
                Some(ids) if ids.contains(&client) => continue,
                Some(ids) => ids.push(client),
                None => {
                    table.insert(key.to_vec(), smallvec::smallvec![client]);
                }
            }
            self.items.fetch_add(1, Ordering::Relaxed);
        }
        let max = self.max_keys.load(Ordering::Relaxed);
        if max > 0 && table.len() > max {
            // As Redis: invalidate keys (any) until back under the limit.
            let over = table.len() - max;
            let evicted: Vec<(Vec<u8>, SmallVec<[u64; 2]>)> = {
                let keys: Vec<Vec<u8>> = table.keys().take(over).cloned().collect();
                keys.into_iter().filter_map(|key| table.remove_entry(&key)).collect()
            };
            drop(table);
            let mut woken = Vec::new();
            for (key, ids) in evicted {
                self.items.fetch_sub(ids.len(), Ordering::Relaxed);
                for id in ids {
                    self.tell(shared, id, Payload::Keys(&[&key]), &mut woken);
                }
            }
            crate::pubsub::wake(&mut woken);
        }
    }

    /// Sends the invalidations `events` call for (after their writes are
    /// durable and visible), as Redis sends them: in the default mode one
    /// message per changed key to each client that read it (but a NOLOOP
    /// writer); in BCAST mode one per prefix with its changed keys,
    /// sorted, to each client of the prefix (less a NOLOOP client's own);
    /// for a flush, a null to every tracking client.
    pub fn invalidate(&self, shared: &Shared, events: &[Event]) {
        let mut woken = Vec::new();
        // Changes only: a flush is below, a key miss changes nothing, and
        // Redis invalidates nothing for a change it publishes no event for.
        let changes = || {
            events.iter().filter(|event| {
                !matches!(event.class, crate::notify::FLUSHED | crate::notify::MISS | crate::notify::UNPUBLISHED)
            })
        };
        for event in changes() {
            let Some(ids) = self.table.lock().remove(&event.key) else { continue };
            self.items.fetch_sub(ids.len(), Ordering::Relaxed);
            for id in ids {
                if id != event.writer || !self.noloop(shared, id) {
                    self.tell(shared, id, Payload::Keys(&[&event.key]), &mut woken);
                }
            }
        }
        // A copy: `tell` takes clients' settings locks, which `enable`
        // holds while it waits for this one.
        let prefixes = self.prefixes.read().clone();
        if !prefixes.is_empty() {
            let mut groups: BTreeMap<&[u8], Group> = BTreeMap::new();
            for (prefix, id) in &prefixes {
                groups.entry(prefix).or_default().0.push(*id);
            }
            for event in changes() {
                for (prefix, (_, keys)) in groups.iter_mut() {
                    if event.key.starts_with(prefix) {
                        keys.insert(&event.key, event.writer);
                    }
                }
            }
            for (ids, keys) in groups.values().filter(|(_, keys)| !keys.is_empty()) {
                for &id in ids {
                    let noloop = keys.values().any(|&writer| writer == id) && self.noloop(shared, id);
                    let told: Vec<&[u8]> =
                        keys.iter().filter(|&(_, &writer)| !(noloop && writer == id)).map(|(key, _)| *key).collect();
                    if !told.is_empty() {
                        self.tell(shared, id, Payload::Keys(&told), &mut woken);
                    }
                }
            }
        }
        if events.iter().any(|event| event.class == crate::notify::FLUSHED) {
            self.flushed(shared, &mut woken);
        }
        crate::pubsub::wake(&mut woken);
    }

    fn noloop(&self, shared: &Shared, id: u64) -> bool {
        let client = shared.clients.lock().get(&id).cloned();
        client.is_some_and(|client| client.tracking.lock().as_ref().is_some_and(|s| s.noloop))
    }

    /// Every key may have changed: a null to every tracking client (NOLOOP
    /// or not, as in Redis), and the table emptied.
    fn flushed(&self, shared: &Shared, woken: &mut Vec<Arc<ClientInfo>>) {
        let tracking: Vec<u64> = shared
            .clients
            .lock()
            .values()
            .filter(|client| client.tracking.lock().is_some())
            .map(|client| client.id)
            .collect();
        for id in tracking {
            self.tell(shared, id, Payload::Flush, woken);
        }
        let mut table = self.table.lock();
        table.clear();
        self.items.store(0, Ordering::Relaxed);
    }

    /// Sends `payload` for client `id` (to the client it redirects to, if
    /// any; a gone redirect client is noted and, in RESP3, reported).
    fn tell(&self, shared: &Shared, id: u64, payload: Payload<'_>, woken: &mut Vec<Arc<ClientInfo>>) {
        let clients = shared.clients.lock();
        let Some(client) = clients.get(&id).cloned() else { return };
        let client_resp3 = client.resp.load(Ordering::Relaxed) == 3;
        let redirect = {
            let mut settings = client.tracking.lock();
            let Some(settings) = settings.as_mut() else { return };
            if settings.redirect != 0 && !clients.contains_key(&settings.redirect) {
                settings.broken_redirect = true;
                let redirect = settings.redirect;
                drop(clients);
                if client_resp3 {
                    crate::pubsub::post_push(&client, redirect_broken(redirect), woken);
                }
                return;
            }
            settings.redirect
        };
        let target = if redirect == 0 { client } else { clients.get(&redirect).cloned().expect("checked") };
        drop(clients);
        // A flush's null is written as the tracking client's protocol has
        // it, whoever receives it (as Redis does).
        let null3 = client_resp3;
        if target.resp.load(Ordering::Relaxed) == 3 {
            crate::pubsub::post_push(&target, message(payload, null3), woken);
        } else if redirect != 0 && target.is_subscriber() {
            crate::pubsub::post_push(&target, pubsub_message(payload, null3), woken);
        }
        // A RESP2 client without a redirect cannot be told: Redis sends
        // nothing either.
    }
}

/// Notes the keys `command` is about to read for a connection that tracks
/// them in the default mode (OPTIN: only after CLIENT CACHING YES;
/// OPTOUT: unless after CLIENT CACHING NO), as Redis does for read-only
/// commands. Before the read, so a write that commits after it began finds
/// them.
pub fn remember_reads(shared: &Shared, conn: &ConnState, command: &Command, args: &[Bytes]) {
    let Some(settings) = &conn.tracking else { return };
    let wanted = match () {
        _ if settings.bcast || !command.has(READONLY) => false,
        _ if settings.optin => conn.caching,
        _ if settings.optout => !conn.caching,
        _ => true,
    };
    if wanted {
        shared.tracking.remember(shared, conn.info.id, command.key_args(args));
    }
}

/// Turns tracking off for the connection (RESET).
pub fn reset(shared: &Shared, conn: &mut ConnState) {
    shared.tracking.disable(&conn.info);
    conn.tracking = None;
    conn.caching = false;
}

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN]
/// [OPTOUT] [NOLOOP]`, with Redis's checks and errors.
pub fn command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut settings = Settings::default();
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        let option = &args[i];
        match () {
            _ if eq(option, "redirect") && more => {
                i += 1;
                if settings.redirect != 0 {
                    return Err(err("ERR A client can only redirect to a single other client"));
                }
                let id = int(&args[i])?;
                let exists = u64::try_from(id)
                    .ok()
                    .filter(|&id| id != 0)
                    .is_some_and(|id| ctx.shared.clients.lock().contains_key(&id));
                if !exists {
                    return Err(err("ERR The client ID you want redirect to does not exist"));
                }
                settings.redirect = id as u64;
            }
            _ if eq(option, "bcast") => settings.bcast = true,
            _ if eq(option, "optin") => settings.optin = true,
            _ if eq(option, "optout") => settings.optout = true,
            _ if eq(option, "noloop") => settings.noloop = true,
            _ if eq(option, "prefix") && more => {
                i += 1;
                settings.prefixes.push(args[i].to_vec());
            }
            _ => return Err(CmdError::Syntax),
        }
        i += 1;
    }
    if eq(&args[2], "off") {
        reset(ctx.shared, ctx.conn);
        ctx.out.ok();
        return Ok(());
    }
    if !eq(&args[2], "on") {
        return Err(CmdError::Syntax);
    }
    let current = ctx.conn.tracking.as_ref();
    if !settings.bcast && !settings.prefixes.is_empty() {
        return Err(err("ERR PREFIX option requires BCAST mode to be enabled"));
    }
    if current.is_some_and(|current| current.bcast != settings.bcast) {
        return Err(err(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling \
             it with a different mode.",
        ));
    }
    if settings.bcast && (settings.optin || settings.optout) {
        return Err(err("ERR OPTIN and OPTOUT are not compatible with BCAST"));
    }
    if settings.optin && settings.optout {
        return Err(err("ERR You can't specify both OPTIN mode and OPTOUT mode"));
    }
    if current.is_some_and(|current| (settings.optin && current.optout) || (settings.optout && current.optin)) {
        return Err(err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then \
             re-enabling it with a different mode."));
    }
    if settings.bcast {
        let old: &[Vec<u8>] = current.map_or(&[], |current| &current.prefixes);
        for (i, prefix) in settings.prefixes.iter().enumerate() {
            if let Some(other) = old.iter().find(|other| overlap(prefix, other)) {
                return Err(err(format!(
                    "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not \
                     overlap.",
                    String::from_utf8_lossy(prefix),
                    String::from_utf8_lossy(other)
                )));
            }
            if let Some(other) = settings.prefixes[i + 1..].iter().find(|other| overlap(prefix, other)) {
                return Err(err(format!(
                    "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must \
                     not overlap.",
                    String::from_utf8_lossy(prefix),
                    String::from_utf8_lossy(other)
                )));
            }
        }
        // Redis adds the new prefixes to those the client had; none given
        // is the empty prefix, all keys.
        if settings.prefixes.is_empty() {
            settings.prefixes.push(Vec::new());
        }
        let mut all = old.to_vec();
        for prefix in settings.prefixes.drain(..) {
            if !all.contains(&prefix) {
                all.push(prefix);
            }
        }
        settings.prefixes = all;
    }
    ctx.shared.tracking.enable(&ctx.conn.info, settings.clone());
    ctx.conn.info.gets_pushes.store(true, Ordering::Relaxed);
    if settings.redirect != 0 {
        if let Some(target) = ctx.shared.clients.lock().get(&settings.redirect) {
            target.gets_pushes.store(true, Ordering::Relaxed);
        }
    }
    ctx.conn.tracking = Some(settings);
    ctx.out.ok();
    Ok(())
}

/// Whether one prefix starts the other (Redis's `stringCheckPrefix`).
fn overlap(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// `CLIENT CACHING YES|NO`: whether the next command's keys are tracked
/// (OPTIN, OPTOUT).
pub fn caching(ctx: &mut Ctx<'_>, option: &[u8]) -> CmdResult {
    let Some(settings) = &ctx.conn.tracking else {
        return Err(err(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode \
             enabled",
        ));
    };
    match () {
        _ if eq(option, "yes") && settings.optin => {}
        _ if eq(option, "yes") => {
            return Err(err("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."))
        }
        _ if eq(option, "no") && settings.optout => {}
        _ if eq(option, "no") => {
            return Err(err("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."))
        }
        _ => return Err(CmdError::Syntax),
    }
    ctx.conn.caching = true;
    ctx.out.ok();
    Ok(())
}

/// `CLIENT TRACKINGINFO`: flags, redirect, prefixes.
pub fn info(ctx: &mut Ctx<'_>) {
    let settings = ctx.conn.info.tracking.lock().clone();
    let mut flags: Vec<&[u8]> = vec![if settings.is_some() { b"on" } else { b"off" }];
    if let Some(settings) = &settings {
        let caching = ctx.conn.caching;
        for (on, flag) in [
            (settings.bcast, &b"bcast"[..]),
            (settings.optin, b"optin"),
            (settings.optin && caching, b"caching-yes"),
            (settings.optout, b"optout"),
            (settings.optout && caching, b"caching-no"),
            (settings.noloop, b"noloop"),
            (settings.broken_redirect, b"broken_redirect"),
        ] {
            if on {
                flags.push(flag);
            }
        }
    }
    ctx.out.map(3);
    ctx.out.bulk(b"flags");
    ctx.out.set(flags.len());
    for flag in flags {
        ctx.out.bulk(flag);
    }
    ctx.out.bulk(b"redirect");
    ctx.out.int(settings.as_ref().map_or(-1, |settings| settings.redirect as i64));
    ctx.out.bulk(b"prefixes");
    let mut prefixes = settings.map(|settings| settings.prefixes).unwrap_or_default();
    prefixes.sort();
    ctx.out.array(prefixes.len());
    for prefix in prefixes {
        ctx.out.bulk(&prefix);
    }
}

/// A BCAST prefix's clients, and its changed keys with their writers.
type Group<'a> = (Vec<u64>, BTreeMap<&'a [u8], u64>);

/// What an invalidation names.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Keys(&'a [&'a [u8]]),
    /// Everything (a flush): a null.
    Flush,
}

fn put_bulk(buf: &mut BytesMut, bytes: &[u8]) {
    buf.put_u8(b'$');
    buf.put_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
    buf.put_slice(b"\r\n");
    buf.put_slice(bytes);
    buf.put_slice(b"\r\n");
}

fn put_payload(buf: &mut BytesMut, payload: Payload<'_>, resp3: bool) {
    match payload {
        Payload::Keys(keys) => {
            buf.put_u8(b'*');
            buf.put_slice(itoa::Buffer::new().format(keys.len()).as_bytes());
            buf.put_slice(b"\r\n");
            for key in keys {
                put_bulk(buf, key);
            }
        }
        Payload::Flush if resp3 => buf.put_slice(b"_\r\n"),
        Payload::Flush => buf.put_slice(b"$-1\r\n"),
    }
}

/// `invalidate` and the keys, as an array (a push in RESP3).
fn message(payload: Payload<'_>, resp3: bool) -> Bytes {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_slice(b"*2\r\n");
    put_bulk(&mut buf, b"invalidate");
    put_payload(&mut buf, payload, resp3);
    buf.freeze()
}

/// A pub/sub message on `__redis__:invalidate` (a RESP2 redirect client).
fn pubsub_message(payload: Payload<'_>, resp3_null: bool) -> Bytes {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_slice(b"*3\r\n");
    put_bulk(&mut buf, b"message");
    put_bulk(&mut buf, b"__redis__:invalidate");
    put_payload(&mut buf, payload, resp3_null);
    buf.freeze()
}

/// `tracking-redir-broken` and the ID that is gone.
fn redirect_broken(id: u64) -> Bytes {
    let mut buf = BytesMut::with_capacity(48);
    buf.put_slice(b"*2\r\n");
    put_bulk(&mut buf, b"tracking-redir-broken");
    buf.put_u8(b':');
    buf.put_slice(itoa::Buffer::new().format(id).as_bytes());
    buf.put_slice(b"\r\n");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_as_redis_writes_them() {
        let keys: [&[u8]; 2] = [b"a", b"bc"];
        assert_eq!(
            &message(Payload::Keys(&keys), true)[..],
            b"*2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n"
        );
        assert_eq!(&message(Payload::Flush, true)[..], b"*2\r\n$10\r\ninvalidate\r\n_\r\n");
        assert_eq!(
            &pubsub_message(Payload::Flush, false)[..],
            b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"
        );
        assert_eq!(&redirect_broken(7)[..], b"*2\r\n$21\r\ntracking-redir-broken\r\n:7\r\n");
    }
}
