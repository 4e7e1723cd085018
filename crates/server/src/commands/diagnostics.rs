//! SLOWLOG and LATENCY: what the server noticed about slow commands
//! (`crate::slowlog`, `crate::latency`).

use bytes::Bytes;
use scaledkv::now_ms;

use super::{err, subcommand, CmdResult, Ctx};

/// SLOWLOG GET [count] | LEN | RESET | HELP (`crate::slowlog`).
pub fn slowlog(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let log = &ctx.shared.slowlog;
    let sub = subcommand("slowlog", args, &[("get", -2), ("help", 2), ("len", 2), ("reset", 2)])?;
    match sub.as_str() {
        "help" => ctx.out.help(&[
            "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
            "HELP",
            "    Prints this help.",
        ]),
        "reset" => {
            log.reset();
            ctx.out.ok();
        }
        "len" => ctx.out.int(log.len() as i64),
        // GET [count], the one left.
        _ if args.len() <= 3 => {
            let count = match args.get(2) {
                None => Some(10),
                Some(arg) => match super::args::int(arg) {
                    Ok(-1) => None,
                    Ok(n) if n >= 0 => Some(n as usize),
                    _ => return Err(err("ERR count should be greater than or equal to -1")),
                },
            };
            let entries = log.newest(count);
            let out = &mut *ctx.out;
            out.array(entries.len());
            for entry in entries {
                out.array(6);
                out.int(entry.id as i64);
                out.int(entry.time as i64);
                out.int(entry.micros as i64);
                out.array(entry.args.len());
                for arg in &entry.args {
                    out.bulk(arg);
                }
                out.bulk(entry.peer.as_bytes());
                out.bulk(entry.name.as_bytes());
            }
        }
        _ => return Err(super::subcommand_syntax("SLOWLOG", &args[1])),
    }
    Ok(())
}

/// LATENCY LATEST | HISTORY event | RESET [event...] | GRAPH event |
/// DOCTOR | HISTOGRAM [command...] | HELP (`crate::latency`,
/// `crate::commandstats`).
pub fn latency(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let monitor = &ctx.shared.latency;
    let now = now_ms() / 1000;
    let sub = subcommand(
        "latency",
        args,
        &[("doctor", 2), ("graph", 3), ("help", 2), ("histogram", -2), ("history", 3), ("latest", 2), ("reset", -2)],
    )?;
    let out = &mut *ctx.out;
    match sub.as_str() {
        "latest" => {
            let events = monitor.events();
            out.array(events.len());
            for (event, series) in events {
                let (time, millis) = series.latest();
                out.array(4);
                out.bulk(event.as_bytes());
                out.int(time as i64);
                out.int(millis as i64);
                out.int(series.max as i64);
            }
        }
        "history" => {
            let history = monitor.event(&args[2]).map(|(_, series)| series.history()).unwrap_or_default();
            out.array(history.len());
            for (time, millis) in history {
                out.array(2);
                out.int(time as i64);
                out.int(millis as i64);
            }
        }
        "reset" => {
            let names: Vec<&[u8]> = args[2..].iter().map(|name| &name[..]).collect();
            out.int(monitor.reset(&names) as i64);
        }
        "graph" => {
            let Some((event, series)) = monitor.event(&args[2]) else {
                return Err(err(format!("ERR No samples available for event '{}'", String::from_utf8_lossy(&args[2]))));
            };
            out.verbatim(&crate::latency::graph(event, &series, now));
        }
        "doctor" => out.verbatim(&monitor.doctor(now, ctx.shared.slowlog.slower_than())),
        "histogram" => histogram(out, &args[2..]),
        // HELP, the one left.
        _ => out.help(&[
            "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified \
             command names.",
            "    If no commands are specified then all histograms are replied.",
            "HELP",
            "    Prints this help.",
        ]),
    }
    Ok(())
}

/// LATENCY HISTOGRAM [command...]: each command's calls and the
/// cumulative counts of their times at Redis's levels (all commands called
/// when none is named; a name not known is left out). Containers count
/// as one command.
fn histogram(out: &mut crate::resp::Out, names: &[Bytes]) {
    let counts = crate::commandstats::commands();
    let wanted: Vec<usize> = names.iter().filter_map(|name| super::lookup(name)).map(super::index_of).collect();
    let shown: Vec<_> = counts
        .iter()
        .filter(|(index, counts)| counts[0] > 0 && (names.is_empty() || wanted.contains(index)))
        .filter_map(|(index, counts)| {
            let histogram = crate::commandstats::histogram(*index)?;
            Some((super::by_index(*index)?, counts[0], crate::histogram::cumulative(&histogram)))
        })
        .collect();
    out.map(shown.len());
    for (command, calls, points) in shown {
        out.bulk(command.name.as_bytes());
        out.map(2);
        out.bulk(b"calls");
        out.int(calls as i64);
        out.bulk(b"histogram_usec");
        out.map(points.len());
        for (micros, cumulative) in points {
            out.int(micros as i64);
            out.int(cumulative as i64);
        }
    }
}
