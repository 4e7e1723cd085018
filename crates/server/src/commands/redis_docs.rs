//! COMMAND DOCS as Redis 7.0 answers it: its own reply, kept as RESP3
//! (`redis_docs.resp`, written by `scripts/gen-redis-commands.py` from
//! redis-server 7.0.15) and written again in the client's protocol, so
//! redis-cli's hints and HELP show each command's arguments.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::resp::reply::Out;

/// A reply as RESP3 types it.
pub enum Node {
    Map(Vec<(Node, Node)>),
    Set(Vec<Node>),
    Array(Vec<Node>),
    Bulk(&'static [u8]),
    Status(&'static str),
    Int(i64),
}

/// Each command's documentation, by name.
static DOCS: LazyLock<HashMap<&'static [u8], Node>> = LazyLock::new(|| {
    let mut at = 0;
    let Node::Map(entries) = parse(include_bytes!("redis_docs.resp"), &mut at) else {
        panic!("redis_docs.resp is not a map")
    };
    entries
        .into_iter()
        .map(|(name, docs)| match name {
            Node::Bulk(name) => (name, docs),
            _ => panic!("a command name in redis_docs.resp is not a string"),
        })
        .collect()
});

/// The documentation of `fullname` (`config|get` for a subcommand, from
/// its container's), if Redis has it.
pub fn of(fullname: &str) -> Option<&'static Node> {
    let Some((container, _)) = fullname.split_once('|') else { return DOCS.get(fullname.as_bytes()) };
    let Node::Map(fields) = DOCS.get(container.as_bytes())? else { return None };
    let subcommands = fields.iter().find(|(key, _)| matches!(key, Node::Bulk(b"subcommands")))?;
    let Node::Map(subcommands) = &subcommands.1 else { return None };
    let found = subcommands.iter().find(|(name, _)| matches!(name, Node::Bulk(name) if *name == fullname.as_bytes()));
    found.map(|(_, docs)| docs)
}

pub fn write(node: &Node, out: &mut Out) {
    match node {
        Node::Map(entries) => {
            out.map(entries.len());
            for (key, value) in entries {
                write(key, out);
                write(value, out);
            }
        }
        Node::Set(items) => {
            out.set(items.len());
            items.iter().for_each(|item| write(item, out));
        }
        Node::Array(items) => {
            out.array(items.len());
            items.iter().for_each(|item| write(item, out));
        }
        Node::Bulk(bytes) => out.bulk(bytes),
        Node::Status(text) => out.simple(text),
        Node::Int(n) => out.int(*n),
    }
}

/// Reads the reply at `*at` (the file is ours, from Redis: a malformed one
/// is a build's mistake, hence the panics).
fn parse(bytes: &'static [u8], at: &mut usize) -> Node {
    let end = *at + bytes[*at..].windows(2).position(|w| w == b"\r\n").expect("a line");
    let line = std::str::from_utf8(&bytes[*at + 1..end]).expect("a header");
    let kind = bytes[*at];
    *at = end + 2;
    let number = || line.parse::<usize>().expect("a length");
    let items = |at: &mut usize, n: usize| (0..n).map(|_| parse(bytes, at)).collect::<Vec<_>>();
    match kind {
        b'%' => Node::Map((0..number()).map(|_| (parse(bytes, at), parse(bytes, at))).collect()),
        b'~' => Node::Set(items(at, number())),
        b'*' => Node::Array(items(at, number())),
        b'$' => {
            let len = number();
            let data = &bytes[*at..*at + len];
            *at += len + 2;
            Node::Bulk(data)
        }
        b'+' => Node::Status(line),
        b':' => Node::Int(line.parse().expect("an integer")),
        other => panic!("unexpected RESP3 type {:?} in redis_docs.resp", other as char),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_of_redis_7_is_documented() {
        assert_eq!(DOCS.len(), 240);
        let Some(Node::Map(set)) = of("set") else { panic!("SET's docs") };
        assert!(set.iter().any(|(key, _)| matches!(key, Node::Bulk(b"arguments"))));
        assert!(matches!(of("config|get"), Some(Node::Map(_))));
        assert!(of("config|nosuch").is_none() && of("nosuch").is_none());
    }
}
