//! Publish/subscribe, as Redis has it: who listens to which channel,
//! pattern and shard channel (`PubSub`), what one connection listens to
//! (`Subscriptions`), and the messages waiting to be sent to it
//! (`Mailbox`). Nothing here touches the engine: like Redis's, messages
//! are delivered to whoever listens now and kept nowhere.
//!
//! A publisher puts the message in each listener's mailbox and wakes its
//! connection, which sends it before the reply to its next command (or at
//! once when idle). Mailboxes are filled while the publisher holds the
//! registry's read lock and an unsubscribe takes its write lock, so once
//! an unsubscribe has left the registry no message for it can still
//! arrive: what came before is sent before its reply, as in Redis.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::conn::ClientInfo;
use crate::keyspace::glob_match;
use crate::resp::{Out, Protocol};

/// The three name spaces a client subscribes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// SUBSCRIBE / PUBLISH.
    Channel = 0,
    /// PSUBSCRIBE: glob patterns matched against PUBLISH's channel.
    Pattern = 1,
    /// SSUBSCRIBE / SPUBLISH (Redis 7's shard channels: a name space of
    /// their own, which in a cluster lives on one shard).
    Shard = 2,
}

impl Class {
    /// The kind named in subscribe and unsubscribe replies.
    pub fn subscribe_kind(self) -> &'static [u8] {
        match self {
            Class::Channel => b"subscribe",
            Class::Pattern => b"psubscribe",
            Class::Shard => b"ssubscribe",
        }
    }

    pub fn unsubscribe_kind(self) -> &'static [u8] {
        match self {
            Class::Channel => b"unsubscribe",
            Class::Pattern => b"punsubscribe",
            Class::Shard => b"sunsubscribe",
        }
    }
}

/// A class's `client-output-buffer-limit`: a client whose waiting output
/// passes `hard` bytes is closed at once; past `soft` for more than
/// `soft_secs` seconds on end, too (0: no such limit).
pub struct OutputLimit {
    hard: AtomicUsize,
    soft: AtomicUsize,
    soft_secs: AtomicU64,
}

impl OutputLimit {
    const fn new(hard: usize, soft: usize, soft_secs: u64) -> OutputLimit {
        OutputLimit { hard: AtomicUsize::new(hard), soft: AtomicUsize::new(soft), soft_secs: AtomicU64::new(soft_secs) }
    }

    pub fn get(&self) -> (usize, usize, u64) {
        (self.hard.load(Ordering::Relaxed), self.soft.load(Ordering::Relaxed), self.soft_secs.load(Ordering::Relaxed))
    }

    pub fn set(&self, (hard, soft, soft_secs): (usize, usize, u64)) {
        self.hard.store(hard, Ordering::Relaxed);
        self.soft.store(soft, Ordering::Relaxed);
        self.soft_secs.store(soft_secs, Ordering::Relaxed);
    }
}

/// Redis's defaults, process-wide as Redis's `server` settings are: the
/// pubsub class bounds every mailbox (subscribers, MONITOR's lines,
/// client-side caching's redirected invalidations); replicas' is kept for
/// CONFIG GET (ScaledKV has none). Normal clients' output is bounded by
/// the reading of their input: their class stays `0 0 0`.
pub static PUBSUB_LIMIT: OutputLimit = OutputLimit::new(PUBSUB_DEFAULT.0, PUBSUB_DEFAULT.1, PUBSUB_DEFAULT.2);
pub static REPLICA_LIMIT: OutputLimit = OutputLimit::new(REPLICA_DEFAULT.0, REPLICA_DEFAULT.1, REPLICA_DEFAULT.2);
/// Hard and soft limits in bytes, soft seconds.
pub const PUBSUB_DEFAULT: (usize, usize, u64) = (32 << 20, 8 << 20, 60);
pub const REPLICA_DEFAULT: (usize, usize, u64) = (256 << 20, 64 << 20, 60);

/// Parsed `client-output-buffer-limit` groups, to `apply` all at once
/// (the normal class's, always `0 0 0`, has nothing to set).
pub struct OutputLimits(Vec<(&'static OutputLimit, (usize, usize, u64))>);

impl OutputLimits {
    pub fn apply(self) {
        for (class, limit) in self.0 {
            class.set(limit);
        }
    }
}

/// Parses `<class> <hard> <soft> <soft seconds>` groups with Redis's
/// errors (the reason, which CONFIG SET frames). Normal clients' output
/// has no limit but their reading (see `PUBSUB_LIMIT`): other values for
/// them are refused rather than ignored.
pub fn parse_output_limits(text: &str) -> Result<OutputLimits, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut limits = Vec::new();
    for group in words.chunks(4) {
        let class = match group[0].to_ascii_lowercase().as_str() {
            "normal" => None,
            "slave" | "replica" => Some(&REPLICA_LIMIT),
            "pubsub" => Some(&PUBSUB_LIMIT),
            _ => return Err("Invalid client class specified in buffer limit configuration.".into()),
        };
        let (hard, soft) = (crate::maxmemory::parse_bytes(group[1]), crate::maxmemory::parse_bytes(group[2]));
        // Seconds: a whole integer, at least 0 (`-0` and `+3` pass, as in Redis).
        let secs = group[3].parse::<i64>().ok().filter(|&secs| secs >= 0);
        let (Some(hard), Some(soft), Some(secs)) = (hard, soft, secs) else {
            return Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into());
        };
        let limit = (hard as usize, soft as usize, secs as u64);
        match class {
            Some(class) => limits.push((class, limit)),
            None if limit != (0, 0, 0) => {
                return Err("ScaledKV has no output buffer limit for normal clients (their output waits for them \
                            to read it): only `normal 0 0 0`"
                    .into())
            }
            None => {}
        }
    }
    Ok(OutputLimits(limits))
}

/// What a message costs in a mailbox besides its bytes.
const MESSAGE_OVERHEAD_BYTES: usize = 64;

/// A message as it goes out, encoded once for all its listeners: RESP2's
/// array, which RESP3 sends as a push by its first byte alone (`push`),
/// or a line sent as it is in both (MONITOR's).
#[derive(Clone)]
struct Message {
    bytes: Bytes,
    push: bool,
}

impl Message {
    /// `kind` ("message", "pmessage", "smessage"), the pattern that
    /// matched for a pmessage, the channel and the payload.
    fn new(kind: &[u8], pattern: Option<&[u8]>, channel: &[u8], payload: &[u8]) -> Message {
        let bytes = 16 * 4 + kind.len() + pattern.map_or(0, <[u8]>::len) + channel.len() + payload.len();
        let mut out = Out::with_buf(bytes::BytesMut::with_capacity(bytes), Protocol::Resp2);
        out.array(3 + pattern.is_some() as usize);
        out.bulk(kind);
        if let Some(pattern) = pattern {
            out.bulk(pattern);
        }
        out.bulk(channel);
        out.bulk(payload);
        Message { bytes: out.buf.freeze(), push: true }
    }

    fn cost(&self) -> usize {
        MESSAGE_OVERHEAD_BYTES + self.bytes.len()
    }

    fn encode(&self, out: &mut Out) {
        if self.push && out.protocol == Protocol::Resp3 {
            out.buf.reserve(self.bytes.len());
            out.buf.extend_from_slice(b">");
            out.buf.extend_from_slice(&self.bytes[1..]);
        } else {
            out.buf.extend_from_slice(&self.bytes);
        }
    }
}

/// Queues `line` (a whole reply, sent as it is) for `client`, as `post`
/// does a message (MONITOR's lines).
pub fn post_line(client: &Arc<ClientInfo>, line: Bytes, woken: &mut Vec<Arc<ClientInfo>>) {
    post(client, Message { bytes: line, push: false }, woken);
}

/// Queues `array` (a RESP2 array, sent as a push in RESP3) for `client`,
/// as `post` does a message (client-side caching's invalidations).
pub fn post_push(client: &Arc<ClientInfo>, array: Bytes, woken: &mut Vec<Arc<ClientInfo>>) {
    post(client, Message { bytes: array, push: true }, woken);
}

/// Messages published to a client and not yet sent.
#[derive(Default)]
pub struct Mailbox {
    queue: Mutex<Queue>,
    /// Whether messages are queued: read without the lock on every command
    /// of a subscribed client.
    waiting: AtomicBool,
    /// What the messages handed to the connection's output cost and the
    /// socket has not taken yet: counted against the limit with those
    /// still queued, as Redis counts a client's whole output buffer (else
    /// a subscriber that stopped reading held twice the limit).
    handed: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    messages: VecDeque<Message>,
    bytes: usize,
    /// Over the limit once: the client is being closed, take nothing more.
    closed: bool,
    /// Since when the mailbox has been past the soft limit.
    over_soft_since: Option<std::time::Instant>,
}

impl Mailbox {
    pub fn has_mail(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Appends every waiting message to `out`; whether there were any.
    pub fn deliver(&self, out: &mut Out) -> bool {
        if !self.has_mail() {
            return false;
        }
        let messages = {
            let mut queue = self.queue.lock();
            self.handed.fetch_add(std::mem::take(&mut queue.bytes), Ordering::Relaxed);
            self.waiting.store(false, Ordering::Release);
            std::mem::take(&mut queue.messages)
        };
        for message in &messages {
            message.encode(out);
        }
        !messages.is_empty()
    }

    /// The socket took all but `unsent` bytes of the connection's output:
    /// at most that much of the mail handed to it is still waiting.
    pub fn written(&self, unsent: usize) {
        if self.handed.load(Ordering::Relaxed) > unsent {
            self.handed.fetch_min(unsent, Ordering::Relaxed);
        }
    }
}

/// Queues `message` for `client`, and adds the client to `woken` when its
/// mailbox was empty (a later message finds the wake-up on its way); a
/// client over its limit is closed instead, as Redis closes a subscriber
/// whose output buffer passed `client-output-buffer-limit`.
fn post(client: &Arc<ClientInfo>, message: Message, woken: &mut Vec<Arc<ClientInfo>>) {
    let cost = message.cost();
    let mut queue = client.mail.queue.lock();
    if queue.closed {
        return;
    }
    let waiting = queue.bytes + client.mail.handed.load(Ordering::Relaxed) + cost;
    let (hard, soft, soft_secs) = PUBSUB_LIMIT.get();
    let over_soft = if soft > 0 && waiting > soft {
        // As Redis: the first message past it starts the clock.
        let since = *queue.over_soft_since.get_or_insert_with(std::time::Instant::now);
        since.elapsed() > std::time::Duration::from_secs(soft_secs)
    } else {
        queue.over_soft_since = None;
        false
    };
    if hard > 0 && waiting > hard || over_soft {
        queue.closed = true;
        queue.messages = VecDeque::new();
        queue.bytes = 0;
        drop(queue);
        client.mail.waiting.store(false, Ordering::Release);
        tracing::warn!(
            client = client.id,
            addr = %client.addr,
            waiting,
            hard,
            soft,
            soft_secs,
            "closing a subscriber that does not read its messages (client-output-buffer-limit pubsub)"
        );
        client.kill();
        return;
    }
    queue.bytes += cost;
    let first = queue.messages.is_empty();
    queue.messages.push_back(message);
    if first {
        client.mail.waiting.store(true, Ordering::Release);
    }
    drop(queue);
    if first {
        woken.push(client.clone());
    }
}

/// Wakes the connections of `woken` to send their mail. A publisher wakes
/// them once its pipeline is done, not per PUBLISH: as Redis writes a
/// subscriber's messages once per turn of its event loop, a subscriber
/// then sends a pipeline's messages in one write, where a wake-up per
/// message made a write per message (0.63x Redis's rate with one
/// subscriber).
pub fn wake(woken: &mut Vec<Arc<ClientInfo>>) {
    for client in woken.drain(..) {
        client.wake.notify_one();
    }
}

type Listeners = HashMap<Bytes, Vec<Arc<ClientInfo>>>;

/// Who listens to what, server-wide.
#[derive(Default)]
pub struct PubSub {
    classes: [RwLock<Listeners>; 3],
    /// Distinct patterns listened to: PUBLISH skips the pattern walk (and
    /// its lock) while there are none.
    patterns: AtomicUsize,
}

impl PubSub {
    /// Adds `client` to `name`'s listeners (its `Subscriptions` know it
    /// was not one: no scan of the others here).
    fn add(&self, class: Class, name: &Bytes, client: &Arc<ClientInfo>) {
        let mut listeners = self.classes[class as usize].write();
        let entry = listeners.entry(name.clone()).or_default();
        debug_assert!(entry.iter().all(|c| c.id != client.id));
        entry.push(client.clone());
        if class == Class::Pattern && entry.len() == 1 {
            self.patterns.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn remove<'n>(&self, class: Class, names: impl Iterator<Item = &'n Bytes>, client: u64) {
        let mut listeners = self.classes[class as usize].write();
        for name in names {
            let Some(entry) = listeners.get_mut(name) else { continue };
            entry.retain(|c| c.id != client);
            if entry.is_empty() {
                listeners.remove(name);
                if class == Class::Pattern {
                    self.patterns.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// PUBLISH: the number of clients that received it (a client listening
    /// to the channel and to a matching pattern counts twice, as in Redis).
    /// Their connections are added to `woken` for `wake`.
    pub fn publish(&self, channel: &[u8], payload: &[u8], woken: &mut Vec<Arc<ClientInfo>>) -> usize {
        // Encoded once for all listeners, and not at all without one.
        let mut message: Option<Message> = None;
        let mut received = 0;
        {
            let listeners = self.classes[Class::Channel as usize].read();
            for client in listeners.get(channel).into_iter().flatten() {
                let message = message.get_or_insert_with(|| Message::new(b"message", None, channel, payload));
                post(client, message.clone(), woken);
                received += 1;
            }
        }
        if self.patterns.load(Ordering::Relaxed) > 0 {
            let listeners = self.classes[Class::Pattern as usize].read();
            for (pattern, clients) in listeners.iter().filter(|(pattern, _)| glob_match(pattern, channel)) {
                let message = Message::new(b"pmessage", Some(pattern), channel, payload);
                for client in clients {
                    post(client, message.clone(), woken);
                    received += 1;
                }
            }
        }
        received
    }

    /// How many clients a PUBLISH to `channel` would reach now (a
    /// transaction's or a script's reply; the message goes once its writes
    /// commit).
    pub fn receivers(&self, channel: &[u8]) -> usize {
        let mut count = self.listeners(Class::Channel, channel);
        if self.patterns.load(Ordering::Relaxed) > 0 {
            let listeners = self.classes[Class::Pattern as usize].read();
            count += listeners
                .iter()
                .filter(|(pattern, _)| glob_match(pattern, channel))
                .map(|(_, c)| c.len())
                .sum::<usize>();
        }
        count
    }

    /// SPUBLISH: the number of clients listening to the shard channel.
    pub fn publish_shard(&self, channel: &[u8], payload: &[u8], woken: &mut Vec<Arc<ClientInfo>>) -> usize {
        let listeners = self.classes[Class::Shard as usize].read();
        let Some(clients) = listeners.get(channel) else { return 0 };
        let message = Message::new(b"smessage", None, channel, payload);
        for client in clients {
            post(client, message.clone(), woken);
        }
        clients.len()
    }

    /// Channels (or shard channels) with a listener whose name matches
    /// `pattern` (all without one): PUBSUB CHANNELS, SHARDCHANNELS.
    pub fn active(&self, class: Class, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let listeners = self.classes[class as usize].read();
        listeners.keys().filter(|name| pattern.is_none_or(|p| glob_match(p, name))).cloned().collect()
    }

    /// How many clients listen to `name`: PUBSUB NUMSUB, SHARDNUMSUB.
    pub fn listeners(&self, class: Class, name: &[u8]) -> usize {
        self.classes[class as usize].read().get(name).map_or(0, Vec::len)
    }

    /// What client `id` listens to (a pattern's class is `Pattern`): the
    /// ACL checks a user's clients when its channel permissions change.
    pub fn subscriptions_of(&self, id: u64) -> Vec<(Class, Bytes)> {
        let mut names = Vec::new();
        for class in [Class::Channel, Class::Pattern, Class::Shard] {
            let listeners = self.classes[class as usize].read();
            let theirs = listeners.iter().filter(|(_, clients)| clients.iter().any(|c| c.id == id));
            names.extend(theirs.map(|(name, _)| (class, name.clone())));
        }
        names
    }

    /// Names with a listener: INFO's `pubsub_channels`, `pubsub_patterns`
    /// (PUBSUB NUMPAT) and `pubsubshard_channels`.
    pub fn count(&self, class: Class) -> usize {
        self.classes[class as usize].read().len()
    }
}

/// What one connection listens to.
#[derive(Default)]
pub struct Subscriptions {
    names: [HashSet<Bytes>; 3],
}

impl Subscriptions {
    /// Any subscription at all: a RESP2 client is then in Redis's
    /// subscribed mode, where only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING,
    /// QUIT and RESET run.
    pub fn any(&self) -> bool {
        self.names.iter().any(|names| !names.is_empty())
    }

    /// The count a (un)subscribe reply carries: channels and patterns
    /// together, shard channels apart (Redis 7.0).
    pub fn count(&self, class: Class) -> usize {
        match class {
            Class::Channel | Class::Pattern => self.names[0].len() + self.names[1].len(),
            Class::Shard => self.names[2].len(),
        }
    }

    pub fn len(&self, class: Class) -> usize {
        self.names[class as usize].len()
    }

    pub fn is_empty(&self) -> bool {
        !self.any()
    }

    /// Subscribes `client` to `name` (copied: a request's bytes share its
    /// read buffer, which the registry would otherwise keep alive).
    pub fn subscribe(&mut self, pubsub: &PubSub, class: Class, name: &[u8], client: &Arc<ClientInfo>) {
        if self.names[class as usize].contains(name) {
            return;
        }
        let name = Bytes::copy_from_slice(name);
        pubsub.add(class, &name, client);
        self.names[class as usize].insert(name);
        client.count_subscriptions(class, self.len(class));
    }

    /// Unsubscribes from `names` (all of the class's when None); the names
    /// and whether each was subscribed, in the order given (for all, the
    /// set's order, as Redis answers in its dictionary's order).
    pub fn unsubscribe(
        &mut self,
        pubsub: &PubSub,
        class: Class,
        names: Option<&[Bytes]>,
        client: &ClientInfo,
    ) -> Vec<(Bytes, bool)> {
        let set = &mut self.names[class as usize];
        let gone: Vec<(Bytes, bool)> = match names {
            Some(names) => names.iter().map(|name| (name.clone(), set.remove(name))).collect(),
            None => set.drain().map(|name| (name, true)).collect(),
        };
        if gone.iter().any(|(_, was)| *was) {
            pubsub.remove(class, gone.iter().filter(|(_, was)| *was).map(|(name, _)| name), client.id);
        }
        client.count_subscriptions(class, self.len(class));
        gone
    }

    /// Leaves everything (the connection closed, or RESET).
    pub fn clear(&mut self, pubsub: &PubSub, client: &ClientInfo) {
        for class in [Class::Channel, Class::Pattern, Class::Shard] {
            if self.len(class) > 0 {
                self.unsubscribe(pubsub, class, None, client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: u64) -> Arc<ClientInfo> {
        Arc::new(ClientInfo::new(
            id,
            crate::socket::Peer::Tcp("127.0.0.1:1".parse().unwrap()),
            crate::socket::Peer::Tcp("127.0.0.1:2".parse().unwrap()),
        ))
    }

    /// A client subscribed to `channel`, and its connection's subscriptions.
    fn subscriber(pubsub: &PubSub, id: u64, channel: &[u8]) -> (Arc<ClientInfo>, Subscriptions) {
        let client = client(id);
        let mut subs = Subscriptions::default();
        subs.subscribe(pubsub, Class::Channel, channel, &client);
        (client, subs)
    }

    fn delivered(client: &ClientInfo, protocol: Protocol) -> String {
        let mut out = Out::new(protocol);
        client.mail.deliver(&mut out);
        String::from_utf8(out.buf.to_vec()).unwrap()
    }

    #[test]
    fn a_message_reaches_channel_and_pattern_listeners_once_each() {
        let pubsub = PubSub::default();
        let (a, b) = (client(1), client(2));
        let (mut subs_a, mut subs_b) = (Subscriptions::default(), Subscriptions::default());
        subs_a.subscribe(&pubsub, Class::Channel, b"news", &a);
        subs_a.subscribe(&pubsub, Class::Pattern, b"n*", &a);
        subs_a.subscribe(&pubsub, Class::Pattern, b"n*", &a);
        subs_b.subscribe(&pubsub, Class::Pattern, b"n*", &b);
        subs_b.subscribe(&pubsub, Class::Shard, b"news", &b);
        assert_eq!((subs_a.count(Class::Channel), subs_b.count(Class::Shard)), (2, 1));
        let mut woken = Vec::new();
        assert_eq!(pubsub.publish(b"news", b"hi", &mut woken), 3);
        assert_eq!(woken.iter().map(|c| c.id).collect::<Vec<_>>(), vec![1, 2], "each mailbox woken once");
        wake(&mut woken);
        assert_eq!(
            delivered(&a, Protocol::Resp2),
            "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        assert_eq!(delivered(&b, Protocol::Resp3), ">4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n");
        assert_eq!(pubsub.publish_shard(b"news", b"s", &mut woken), 1);
        assert_eq!(pubsub.publish(b"other", b"x", &mut woken), 0);
        assert_eq!(delivered(&b, Protocol::Resp2), "*3\r\n$8\r\nsmessage\r\n$4\r\nnews\r\n$1\r\ns\r\n");
        assert!(!a.mail.has_mail());
        assert_eq!((pubsub.count(Class::Channel), pubsub.count(Class::Pattern)), (1, 1));

        let gone = subs_a.unsubscribe(&pubsub, Class::Pattern, Some(&[Bytes::from("n*"), Bytes::from("x")]), &a);
        assert_eq!(gone, vec![(Bytes::from("n*"), true), (Bytes::from("x"), false)]);
        assert_eq!(pubsub.publish(b"news", b"2", &mut woken), 2, "a's channel and b's pattern");
        subs_a.clear(&pubsub, &a);
        subs_b.clear(&pubsub, &b);
        assert!(subs_a.is_empty() && subs_b.is_empty());
        assert_eq!(pubsub.publish(b"news", b"3", &mut woken), 0);
        assert_eq!(pubsub.publish_shard(b"news", b"3", &mut woken), 0);
        for class in [Class::Channel, Class::Pattern, Class::Shard] {
            assert_eq!(pubsub.count(class), 0, "no empty entries left");
        }
        assert_eq!(pubsub.patterns.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_subscriber_that_does_not_read_is_closed_at_the_limit() {
        let pubsub = PubSub::default();
        let (slow, _subs) = subscriber(&pubsub, 1, b"c");
        let payload = vec![b'x'; 1 << 20];
        let mut woken = Vec::new();
        for _ in 0..31 {
            pubsub.publish(b"c", &payload, &mut woken);
        }
        assert_eq!(woken.len(), 1, "woken when its mailbox was empty only");
        assert!(!slow.killed.load(Ordering::Acquire));
        assert!(slow.mail.has_mail());
        pubsub.publish(b"c", &payload, &mut woken);
        assert!(slow.killed.load(Ordering::Acquire), "closed past 32 MiB");
        assert!(!slow.mail.has_mail(), "its messages are let go");
        pubsub.publish(b"c", b"more", &mut woken);
        assert!(!slow.mail.has_mail(), "and nothing more is taken");
    }

    #[test]
    fn mail_handed_to_the_output_counts_until_the_socket_takes_it() {
        let pubsub = PubSub::default();
        let (slow, _slow_subs) = subscriber(&pubsub, 1, b"c");
        let payload = vec![b'x'; 1 << 20];
        let mut woken = Vec::new();
        let mut out = Out::new(Protocol::Resp2);
        for _ in 0..20 {
            pubsub.publish(b"c", &payload, &mut woken);
        }
        assert!(slow.mail.deliver(&mut out), "20 MiB in the output");
        slow.mail.written(out.buf.len() / 2);
        for _ in 0..21 {
            pubsub.publish(b"c", &payload, &mut woken);
        }
        assert!(!slow.killed.load(Ordering::Acquire), "10 MiB unsent, 21 queued");
        pubsub.publish(b"c", &payload, &mut woken);
        assert!(slow.killed.load(Ordering::Acquire), "closed past 32 MiB, counting the output");

        let (reader, _reader_subs) = subscriber(&pubsub, 2, b"d");
        for _ in 0..3 {
            for _ in 0..20 {
                pubsub.publish(b"d", &payload, &mut woken);
            }
            reader.mail.deliver(&mut out);
            reader.mail.written(0);
        }
        assert!(!reader.killed.load(Ordering::Acquire), "60 MiB sent, never 32 waiting");
    }
}
