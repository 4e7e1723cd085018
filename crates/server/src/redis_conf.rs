//! redis-server's way of being configured: a redis.conf named as the first
//! argument (`-`: read from stdin), then `--name value ...` options, each
//! one more line of it, as in `scaledkv-server /etc/redis/redis.conf
//! --port 7000 --hz 20`. Lines are split as Redis splits them (quotes,
//! `\xHH` escapes), `include` reads another file in place, and a later
//! line wins over an earlier one.
//!
//! A directive that names one of ScaledKV's flags (`port`, `dir`,
//! `maxmemory`, `durability` ...) becomes that flag, so a redis.conf sets
//! what the command line sets; the flags given on the command line win.
//! Any other of Redis's parameters (`crate::redis_configs`) is applied as
//! the server starts, with CONFIG SET's checks. A directive Redis does not
//! have, or one ScaledKV cannot honour (`rename-command`, `loadmodule`,
//! `user`), stops the start naming the file, the line and why.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One line of the configuration: its name (lower case) and arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    /// "FILE, line N", or "the command line", for errors.
    pub place: String,
}

/// What the command line holds once the redis.conf and Redis's options
/// are taken out of it.
#[derive(Debug, Default)]
pub struct CommandLine {
    /// For clap: the program's name, the file's directives that are
    /// ScaledKV's flags, then the command line's own flags.
    pub args: Vec<OsString>,
    /// The redis.conf read, if any (`None` for stdin).
    pub file: Option<PathBuf>,
    /// Redis's parameters ScaledKV has no flag for, by CONFIG SET's name,
    /// to be applied as the server starts.
    pub settings: Settings,
}

/// Redis's parameters by CONFIG SET's name, with their values as text.
pub type Settings = Vec<(&'static str, String)>;

/// Redis's directives with a flag of ScaledKV's of another name.
const RENAMED: &[(&str, &str)] =
    &[("io-threads", "threads"), ("slaveof", "replicaof"), ("lua-time-limit", "busy-reply-threshold")];

/// Flags Redis takes several words for (`--save 900 1`, `--bind
/// 127.0.0.1 -::1`): read from the command line as directives.
const SEVERAL: &[&str] = &["save", "bind", "client-output-buffer-limit"];

/// Directives ScaledKV refuses, and why.
const REFUSED: &[(&str, &str)] = &[
    ("rename-command", "ScaledKV does not rename commands (ACL rules can forbid them: see ACL SETUSER)"),
    ("loadmodule", "ScaledKV loads no modules"),
    ("user", "ScaledKV takes ACL users from ACL SETUSER (kept by ACL SAVE), not from the config file"),
    ("sentinel", "ScaledKV is not a Sentinel (Redis's redis-sentinel watches it)"),
];

/// Splits `args` (the program's name first) as redis-server does: a first
/// argument not starting with `-` (or `-` alone) names a redis.conf, and
/// every `--name` that is not one of ScaledKV's flags (`flags`: their long
/// names) starts a directive whose arguments run to the next `--`. Those
/// directives go after the file's, so they win.
pub fn command_line(args: Vec<OsString>, flags: &[String]) -> Result<CommandLine, String> {
    let mut args = args.into_iter();
    let program = args.next().unwrap_or_else(|| "scaledkv-server".into());
    let mut rest: Vec<OsString> = args.collect();
    let mut file = None;
    let mut directives = Vec::new();
    let first = rest.first().map(|arg| arg.to_string_lossy().into_owned());
    if let Some(first) = first.filter(|first| first == "-" || !first.starts_with('-')) {
        rest.remove(0);
        if first == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| format!("cannot read the configuration from stdin: {e}"))?;
            directives.extend(parse(&text, "stdin", Path::new("."), 0)?);
        } else {
            let path = PathBuf::from(&first);
            directives.extend(read(&path, 0)?);
            file = Some(path);
        }
    }
    // The command line's own flags stay for clap, after the file's.
    let mut own = Vec::new();
    let mut at = 0;
    while at < rest.len() {
        let arg = rest[at].to_string_lossy().into_owned();
        let name = arg.strip_prefix("--").map(|name| name.split('=').next().unwrap_or(name).to_string());
        let directive = |name: &String| !name.is_empty() && (!flags.contains(name) || SEVERAL.contains(&name.as_str()));
        match name.filter(directive) {
            Some(name) => {
                let mut values = Vec::new();
                at += 1;
                while at < rest.len() && !rest[at].to_string_lossy().starts_with("--") {
                    values.push(rest[at].to_string_lossy().into_owned());
                    at += 1;
                }
                directives.push(Directive {
                    name: name.to_ascii_lowercase(),
                    args: values,
                    place: "the command line".into(),
                });
            }
            None => {
                own.push(rest[at].clone());
                at += 1;
            }
        }
    }
    let (from_file, settings) = as_flags(&directives, flags)?;
    let mut args = vec![program];
    args.extend(from_file.into_iter().map(OsString::from));
    args.extend(own);
    Ok(CommandLine { args, file, settings })
}

/// A redis.conf's text as `command_line` reads a file, but with every
/// `include` refused without opening anything (for the fuzzer:
/// `fuzz/fuzz_targets/redis_conf.rs`): its directives as ScaledKV's
/// flags and Redis's other settings.
pub fn read_text_without_includes(text: &str, flags: &[String]) -> Result<(Vec<String>, Settings), String> {
    // Past the include depth: an include is refused before its file opens.
    let directives = parse(text, "text", Path::new("."), MAX_INCLUDE_DEPTH + 1)?;
    as_flags(&directives, flags)
}

/// How deep includes go (Redis stops nowhere: this cuts a loop).
const MAX_INCLUDE_DEPTH: usize = 16;

/// The flag of ScaledKV's a directive sets, if it has one by another name.
fn flag_of(name: &str) -> Option<String> {
    RENAMED.iter().find(|(redis, _)| *redis == name).map(|(_, flag)| flag.to_string())
}

/// The directives as ScaledKV's flags (`--name value`) and, for Redis's
/// parameters that have none, settings. `save` and
/// `client-output-buffer-limit` add up over their lines, as in Redis.
fn as_flags(directives: &[Directive], flags: &[String]) -> Result<(Vec<String>, Settings), String> {
    let mut args = Vec::new();
    let mut settings = Vec::new();
    let mut save: Option<Vec<String>> = None;
    let mut limits: Vec<String> = Vec::new();
    for directive in directives {
        let name = directive.name.as_str();
        let bad = |why: &str| format!("{}: '{name} {}': {why}", directive.place, directive.args.join(" "));
        if let Some((_, why)) = REFUSED.iter().find(|(refused, _)| *refused == name) {
            return Err(bad(why));
        }
        match name {
            "include" => return Err(bad("include takes one file")),
            "save" => {
                // `save ""` forgets the lines before; each other line adds
                // a point.
                // One argument of several words (`--save "900 1"`) is
                // split, as Redis splits its settings of several words.
                let points = save.get_or_insert_with(Vec::new);
                let words: Vec<String> = match directive.args.as_slice() {
                    [only] => only.split_whitespace().map(str::to_string).collect(),
                    args => args.to_vec(),
                };
                match words.len() {
                    0 => points.clear(),
                    n if n % 2 == 0 => points.extend(words),
                    _ => return Err(bad("Invalid save parameters")),
                }
                continue;
            }
            "client-output-buffer-limit" => {
                limits.extend(directive.args.iter().cloned());
                continue;
            }
            "bind" => {
                args.extend(["--bind".to_string(), bind_address(&directive.args).map_err(|why| bad(&why))?]);
                continue;
            }
            _ => {}
        }
        let flag = flag_of(name).unwrap_or_else(|| name.to_string());
        if flags.contains(&flag) {
            let [value] = directive.args.as_slice() else {
                let joined = directive.args.join(" ");
                // "host port" and the like are one value to the flag.
                args.extend([format!("--{flag}"), joined]);
                continue;
            };
            args.extend([format!("--{flag}"), flag_value(&flag, value)]);
            continue;
        }
        match crate::redis_configs::find(name) {
            Some(param) => settings.push((param.name.as_str(), directive.args.join(" "))),
            None => return Err(bad("Bad directive or wrong number of arguments")),
        }
    }
    // A later line wins: only the last of a name is applied (an earlier
    // one ScaledKV refuses would stop the start).
    let mut seen = std::collections::HashSet::new();
    settings.reverse();
    settings.retain(|(name, _)| seen.insert(*name));
    settings.reverse();
    if let Some(points) = save {
        args.extend(["--save".to_string(), points.join(" ")]);
    }
    if !limits.is_empty() {
        args.extend(["--client-output-buffer-limit".to_string(), limits.join(" ")]);
    }
    Ok((args, settings))
}

/// A size the flag takes in bytes, from Redis's notation (`512mb`): the
/// flags of sizes in bytes take numbers only.
fn flag_value(flag: &str, value: &str) -> String {
    match flag {
        "proto-max-bulk-len" => crate::maxmemory::parse_bytes(value).map(|n| n.to_string()),
        _ => None,
    }
    .unwrap_or_else(|| value.to_string())
}

/// The one address ScaledKV listens on, from Redis's `bind` list:
/// addresses marked optional (`-::1`) are left out, `*` is every IPv4
/// address and `::*` every IPv6 one.
fn bind_address(addresses: &[String]) -> Result<String, String> {
    let required: Vec<&str> = addresses.iter().filter(|a| !a.starts_with('-')).map(String::as_str).collect();
    let chosen = match required.as_slice() {
        [one] => *one,
        [] => addresses.first().map(|a| a.trim_start_matches('-')).ok_or("bind needs an address")?,
        _ => return Err(format!("ScaledKV listens on one address; bind names {}", required.join(", "))),
    };
    if addresses.len() > 1 {
        tracing::debug!(chosen, "bind: the optional addresses are left out");
    }
    Ok(match chosen {
        "*" => "0.0.0.0".into(),
        "::*" => "::".into(),
        other => other.into(),
    })
}

/// The directives of the redis.conf at `path`, with the files it includes
/// in place (`depth`: how deep in includes).
fn read(path: &Path, depth: usize) -> Result<Vec<Directive>, String> {
    if depth > MAX_INCLUDE_DEPTH {
        return Err(format!("{}: included more than 16 deep (an include loop?)", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    parse(&text, &path.display().to_string(), dir, depth)
}

fn parse(text: &str, file: &str, dir: &Path, depth: usize) -> Result<Vec<Directive>, String> {
    let mut directives = Vec::new();
    for (at, line) in text.split('\n').enumerate() {
        let line = line.trim_matches([' ', '\t', '\r', '\n']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let place = format!("{file}, line {}", at + 1);
        let words = split(line).ok_or_else(|| format!("{place}: '{line}': Unbalanced quotes in configuration line"))?;
        let Some((name, args)) = words.split_first() else { continue };
        let name = name.to_ascii_lowercase();
        if name == "include" {
            let [included] = args else { return Err(format!("{place}: '{line}': include takes one file")) };
            // Relative to the working directory, as in Redis; else beside
            // the including file.
            let mut path = PathBuf::from(included);
            if path.is_relative() && !path.exists() {
                path = dir.join(included);
            }
            directives.extend(read(&path, depth + 1)?);
            continue;
        }
        directives.push(Directive { name, args: args.to_vec(), place });
    }
    Ok(directives)
}

/// CONFIG REWRITE of a redis.conf, as Redis rewrites one: a setting the
/// file names is written with its value now on its first line (its other
/// lines dropped; all of them if it is unset now); one it does not name is
/// appended, under Redis's "Generated by CONFIG REWRITE" line, if its
/// value is not its default. Every other line, comments and all, stays.
/// `include`d files are not rewritten (Redis refuses; the settings they
/// hold are written here).
pub fn rewrite(path: &Path, settings: &[crate::config::Rewritten]) -> std::io::Result<()> {
    const GENERATED: &str = "# Generated by CONFIG REWRITE";
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        read => read?,
    };
    let mut lines: Vec<Option<String>> = text.lines().map(|line| Some(line.to_string())).collect();
    // Each line's directive, split once for all the settings.
    let directive_of: Vec<Option<String>> = text
        .lines()
        .map(|line| {
            let line = line.trim();
            (!line.starts_with('#')).then(|| split(line)).flatten()?.first().map(|name| name.to_ascii_lowercase())
        })
        .collect();
    let mut appended = Vec::new();
    for setting in settings {
        let written = setting.now.as_ref().map(|now| format!("{} {}", setting.key, conf_value(setting.key, now)));
        let names: Vec<&str> = std::iter::once(setting.key).chain(older_name(setting.key)).collect();
        let mut first = true;
        for (line, directive) in lines.iter_mut().zip(&directive_of) {
            if directive.as_deref().is_some_and(|name| names.contains(&name)) {
                *line = if first { written.clone() } else { None };
                first = false;
            }
        }
        if first && setting.now.is_some() && setting.now != setting.default {
            appended.extend(written);
        }
    }
    let mut out: Vec<String> = lines.into_iter().flatten().collect();
    if !appended.is_empty() {
        if !out.iter().any(|line| line == GENERATED) {
            out.push(GENERATED.into());
        }
        out.extend(appended);
    }
    let mut text = out.join("\n");
    text.push('\n');
    crate::config::replace_file(path, &text)
}

/// The older name a redis.conf may use for `key` (`slaveof`).
fn older_name(key: &str) -> Option<&'static str> {
    match key {
        "replicaof" => Some("slaveof"),
        _ => crate::redis_configs::TABLE
            .iter()
            .find(|param| param.alias.as_deref() == Some(key))
            .map(|param| param.name.as_str()),
    }
}

/// A value as a redis.conf line holds it: the words of a setting of
/// several arguments as they are, any other value quoted as Redis's
/// CONFIG REWRITE quotes it (`sdscatrepr`) unless it is one plain word.
fn conf_value(key: &str, value: &str) -> String {
    let plain =
        |word: &str| !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:/*@%+=,".contains(&b));
    if matches!(key, "replicaof" | "client-output-buffer-limit" | "save" | "oom-score-adj-values")
        || key.starts_with("shutdown-on-")
        || key == "latency-tracking-info-percentiles"
        || plain(value)
    {
        return value.to_string();
    }
    let mut quoted = Vec::new();
    crate::resp::request::repr(&mut quoted, value.as_bytes());
    String::from_utf8(quoted).expect("repr writes ASCII")
}

/// A line's words as Redis's `sdssplitargs` splits them (quotes and
/// escapes: `resp::request::split_args`, which inline commands use);
/// `None`: unbalanced quotes.
pub fn split(line: &str) -> Option<Vec<String>> {
    let words = crate::resp::request::split_args(line.as_bytes())?;
    Some(words.into_iter().map(|word| String::from_utf8_lossy(&word).into_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> Vec<String> {
        [
            "port",
            "bind",
            "dir",
            "save",
            "client-output-buffer-limit",
            "threads",
            "replicaof",
            "maxmemory",
            "proto-max-bulk-len",
            "config",
        ]
        .map(String::from)
        .to_vec()
    }

    fn line(args: &[&str]) -> Result<CommandLine, String> {
        command_line(args.iter().map(OsString::from).collect(), &flags())
    }

    #[test]
    fn lines_split_as_redis_splits_them() {
        let words = |line: &str| split(line).unwrap();
        assert_eq!(words("  save 900   1 "), ["save", "900", "1"]);
        assert_eq!(words(r#"requirepass "a b\x41\n" 'it\'s'"#), ["requirepass", "a bA\n", "it's"]);
        assert_eq!(words(r#"notify-keyspace-events """#), ["notify-keyspace-events", ""]);
        for bad in [r#"a "b"#, r#"a "b"c"#, "a 'b", "a 'b'c"] {
            assert_eq!(split(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_redis_conf_and_redis_options_become_flags_and_settings() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("redis.conf");
        let included = dir.path().join("more.conf");
        std::fs::write(&included, "hz 20\nmaxmemory 100mb\n").unwrap();
        let text = format!(
            "# a comment\nbind 127.0.0.1 -::1\nport 7000\nsave 900 1\nsave 300 10\nio-threads 2\n\
             client-output-buffer-limit normal 0 0 0\nclient-output-buffer-limit pubsub 32mb 8mb 60\n\
             include {}\nslaveof 10.0.0.1 6379\nproto-max-bulk-len 1mb\nactiverehashing no\n",
            included.display()
        );
        std::fs::write(&conf, text).unwrap();
        let parsed = line(&["scaledkv-server", conf.to_str().unwrap(), "--port", "7001", "--hz", "30"]).unwrap();
        let args: Vec<String> = parsed.args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "scaledkv-server",
                "--bind",
                "127.0.0.1",
                "--port",
                "7000",
                "--threads",
                "2",
                "--maxmemory",
                "100mb",
                "--replicaof",
                "10.0.0.1 6379",
                "--proto-max-bulk-len",
                "1048576",
                "--save",
                "900 1 300 10",
                "--client-output-buffer-limit",
                "normal 0 0 0 pubsub 32mb 8mb 60",
                // The command line's own flags, last: they win.
                "--port",
                "7001",
            ]
        );
        assert_eq!(parsed.settings, [("activerehashing", "no".into()), ("hz", "30".into())]);
        assert_eq!(parsed.file.as_deref(), Some(conf.as_path()));
    }

    #[test]
    fn what_redis_or_scaledkv_does_not_have_stops_the_start_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("redis.conf");
        for (text, expected) in [
            ("port 1\nnosuch yes\n", "line 2: 'nosuch yes': Bad directive"),
            ("rename-command FLUSHALL \"\"\n", "line 1: 'rename-command FLUSHALL ': ScaledKV does not rename"),
            ("requirepass \"open\n", "line 1: 'requirepass \"open': Unbalanced quotes"),
            ("save 1\n", "Invalid save parameters"),
            ("bind 10.0.0.1 10.0.0.2\n", "ScaledKV listens on one address"),
            ("include /nonexistent/x.conf\n", "cannot read /nonexistent/x.conf"),
        ] {
            std::fs::write(&conf, text).unwrap();
            let error = line(&["scaledkv-server", conf.to_str().unwrap()]).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let error = line(&["scaledkv-server", "--nosuch", "1"]).unwrap_err();
        assert!(error.contains("the command line: 'nosuch 1': Bad directive"), "{error}");
    }

    proptest::proptest! {
        /// Any line splits without a panic; a value CONFIG REWRITE writes
        /// reads back as itself.
        #[test]
        fn lines_split_without_panics_and_written_values_read_back(line in ".{0,64}", value in "\\PC{1,24}") {
            let _ = split(&line);
            let _ = read_text_without_includes(&line, &flags());
            let written = format!("requirepass {}", conf_value("requirepass", &value));
            proptest::prop_assert_eq!(split(&written), Some(vec!["requirepass".to_string(), value]));
        }
    }

    #[test]
    fn binds_take_the_required_address() {
        let bind = |list: &[&str]| bind_address(&list.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(bind(&["127.0.0.1", "-::1"]).unwrap(), "127.0.0.1");
        assert_eq!(bind(&["*", "-::*"]).unwrap(), "0.0.0.0");
        assert_eq!(bind(&["-::1"]).unwrap(), "::1");
    }

    #[test]
    fn without_a_file_the_command_line_is_clap_s() {
        let parsed = line(&["scaledkv-server", "--port", "7000", "--dir", "d"]).unwrap();
        assert_eq!(parsed.args, ["scaledkv-server", "--port", "7000", "--dir", "d"].map(OsString::from));
        assert!(parsed.file.is_none() && parsed.settings.is_empty());
        // Redis's names for ScaledKV's flags and its flags of several
        // words, as redis-server takes them.
        let parsed = line(&[
            "scaledkv-server",
            "--io-threads",
            "2",
            "--slaveof",
            "10.0.0.1",
            "6379",
            "--save",
            "900",
            "1",
            "--bind",
            "127.0.0.1",
            "-::1",
        ])
        .unwrap();
        let expected = [
            "scaledkv-server",
            "--threads",
            "2",
            "--replicaof",
            "10.0.0.1 6379",
            "--bind",
            "127.0.0.1",
            "--save",
            "900 1",
        ];
        assert_eq!(parsed.args, expected.map(OsString::from));
        let parsed = line(&["scaledkv-server", "--save", ""]).unwrap();
        assert_eq!(parsed.args, ["scaledkv-server", "--save", ""].map(OsString::from));
        let parsed = line(&["scaledkv-server", "--save", "900 1 300 10"]).unwrap();
        assert_eq!(parsed.args, ["scaledkv-server", "--save", "900 1 300 10"].map(OsString::from));
    }
}
