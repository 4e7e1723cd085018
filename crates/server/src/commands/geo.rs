//! GEO commands, with Redis 7.0's replies and errors. A geospatial index
//! is a sorted set whose scores are the members' 52-bit geohashes
//! (`crate::geo`), as in Redis: GEOADD is a ZADD, every sorted-set command
//! works on it, and a search reads up to nine score ranges.
//!
//! Members at the same distance come in Redis's order too: a full sort is
//! stable (glibc's qsort is a merge sort), a sort cut short by COUNT is
//! Redis's partial quicksort (`crate::pqsort`).

use std::cmp::Ordering;

use bytes::Bytes;

use super::args::{eq, int};
use super::zsets::{read_zset, store_new_noting, Open};
use super::{err, CmdError, CmdResult, Ctx};
use crate::geo::{self, Search, Shape};
use crate::zset::parse_score;

fn float(arg: &[u8], error: &str) -> Result<f64, CmdError> {
    parse_score(arg).ok_or_else(|| err(error))
}

/// A longitude and latitude argument pair, checked as Redis checks them.
fn point_arg(args: &[Bytes]) -> Result<(f64, f64), CmdError> {
    let lon = parse_score(&args[0]).ok_or(CmdError::NotFloat)?;
    let lat = parse_score(&args[1]).ok_or(CmdError::NotFloat)?;
    if !geo::valid(lon, lat) {
        return Err(err(format!("ERR invalid longitude,latitude pair {lon:.6},{lat:.6}")));
    }
    Ok((lon, lat))
}

fn unit_arg(arg: &[u8]) -> Result<f64, CmdError> {
    geo::unit(arg).ok_or_else(|| err("ERR unsupported unit provided. please use M, KM, FT, MI"))
}

/// `radius unit`: the radius and the unit's metres.
fn radius_arg(args: &[Bytes]) -> Result<(Shape, f64), CmdError> {
    let radius = float(&args[0], "ERR need numeric radius")?;
    if radius < 0.0 {
        return Err(err("ERR radius cannot be negative"));
    }
    Ok((Shape::Radius(radius), unit_arg(&args[1])?))
}

/// `width height unit`.
fn box_arg(args: &[Bytes]) -> Result<(Shape, f64), CmdError> {
    let width = float(&args[0], "ERR need numeric width")?;
    let height = float(&args[1], "ERR need numeric height")?;
    if height < 0.0 || width < 0.0 {
        return Err(err("ERR height or width cannot be negative"));
    }
    Ok((Shape::Box { width, height }, unit_arg(&args[2])?))
}

/// Where `member` is, for a search around it.
fn member_point(ctx: &mut Ctx<'_>, set: &Open<'_>, member: &[u8]) -> Result<(f64, f64), CmdError> {
    let score = set.score(ctx, member)?.ok_or_else(|| err("ERR could not decode requested zset member"))?;
    Ok(geo::decode(score))
}

/// GEOADD key [NX|XX] [CH] longitude latitude member ...: a ZADD of the
/// members' geohashes, so its replies, errors and events are ZADD's.
pub fn geoadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut nx, mut xx) = (false, false);
    let mut at = 2;
    while let Some(arg) = args.get(at) {
        if eq(arg, "nx") {
            nx = true;
        } else if eq(arg, "xx") {
            xx = true;
        } else if !eq(arg, "ch") {
            break;
        }
        at += 1;
    }
    if !(args.len() - at).is_multiple_of(3) || (nx && xx) {
        return Err(CmdError::Syntax);
    }
    let mut zadd: Vec<Bytes> = Vec::with_capacity(at + (args.len() - at) / 3 * 2);
    zadd.push(Bytes::from_static(b"zadd"));
    zadd.extend_from_slice(&args[1..at]);
    for triple in args[at..].chunks(3) {
        let (lon, lat) = point_arg(triple)?;
        let score = geo::score(lon, lat) as u64;
        zadd.push(Bytes::copy_from_slice(itoa::Buffer::new().format(score).as_bytes()));
        zadd.push(triple[2].clone());
    }
    super::zsets::zadd(ctx, &zadd)
}

/// GEOPOS key member ...: each member's [longitude, latitude], or null.
pub fn geopos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_zset(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    let mut points = Vec::with_capacity(args.len() - 2);
    for member in &args[2..] {
        points.push(set.score(ctx, member)?.map(geo::decode));
    }
    ctx.out.array(points.len());
    for point in points {
        match point {
            Some((lon, lat)) => {
                ctx.out.array(2);
                ctx.out.double_text(&geo::format_coordinate(lon));
                ctx.out.double_text(&geo::format_coordinate(lat));
            }
            None => ctx.out.null_array(),
        }
    }
    Ok(())
}

/// GEOHASH key member ...: each member's 11-character geohash, or null.
pub fn geohash(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_zset(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    let mut hashes = Vec::with_capacity(args.len() - 2);
    for member in &args[2..] {
        hashes.push(set.score(ctx, member)?.map(geo::standard_geohash));
    }
    ctx.out.array(hashes.len());
    for hash in hashes {
        ctx.out.bulk_opt(hash.as_ref().map(|h| &h[..]));
    }
    Ok(())
}

/// GEODIST key member1 member2 [unit].
pub fn geodist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let to_meters = match args.len() {
        4 => 1.0,
        5 => unit_arg(&args[4])?,
        _ => return Err(CmdError::Syntax),
    };
    let value = read_zset(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    let (Some(first), Some(second)) = (set.score(ctx, &args[2])?, set.score(ctx, &args[3])?) else {
        ctx.out.null();
        return Ok(());
    };
    let ((lon1, lat1), (lon2, lat2)) = (geo::decode(first), geo::decode(second));
    ctx.out.bulk(geo::format_distance(geo::distance(lon1, lat1, lon2, lat2) / to_meters).as_bytes());
    Ok(())
}

/// Which search command runs, for what it parses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// GEORADIUS[_RO] key longitude latitude radius unit ...
    Radius,
    /// GEORADIUSBYMEMBER[_RO] key member radius unit ...
    ByMember,
    /// GEOSEARCH key FROMMEMBER|FROMLONLAT ... BYRADIUS|BYBOX ...
    Search,
    /// GEOSEARCHSTORE destination source ..., as GEOSEARCH.
    SearchStore,
}

/// A member a search found.
struct Found {
    member: Vec<u8>,
    score: f64,
    point: (f64, f64),
    /// From the centre, in metres until the reply's unit.
    distance: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Ascending,
    Descending,
}

/// A search's options, as they came.
#[derive(Default)]
struct Options<'a> {
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    any: bool,
    count: u64,
    sort: Option<Sort>,
    store: Option<&'a Bytes>,
    store_dist: bool,
    center: Option<(f64, f64)>,
    from_member: bool,
    from_lonlat: bool,
    shape: Option<(Shape, f64)>,
}

/// Redis's `georadiusGeneric`: GEORADIUS, GEORADIUSBYMEMBER, their _RO
/// forms, GEOSEARCH and GEOSEARCHSTORE.
fn search_command(ctx: &mut Ctx<'_>, args: &[Bytes], kind: Kind, read_only: bool) -> CmdResult {
    let source = if kind == Kind::SearchStore { 2 } else { 1 };
    let value = read_zset(ctx, &args[source])?;
    let set = Open::of(value.as_ref())?;
    let mut options = Options::default();
    let base = match kind {
        Kind::Radius => {
            options.center = Some(point_arg(&args[2..4])?);
            options.shape = Some(radius_arg(&args[4..6])?);
            6
        }
        // A missing set's member is nowhere: the options are still read,
        // for the reply they ask for, but not the radius.
        Kind::ByMember if value.is_none() => 5,
        Kind::ByMember => {
            options.center = Some(member_point(ctx, &set, &args[2])?);
            options.shape = Some(radius_arg(&args[3..5])?);
            5
        }
        Kind::Search => 2,
        Kind::SearchStore => {
            options.store = Some(&args[1]);
            3
        }
    };
    let searching = matches!(kind, Kind::Search | Kind::SearchStore);
    let mut at = base;
    while at < args.len() {
        let arg = &args[at];
        let left = args.len() - at - 1;
        if eq(arg, "withdist") {
            options.with_dist = true;
        } else if eq(arg, "withhash") {
            options.with_hash = true;
        } else if eq(arg, "withcoord") {
            options.with_coord = true;
        } else if eq(arg, "any") {
            options.any = true;
        } else if eq(arg, "asc") {
            options.sort = Some(Sort::Ascending);
        } else if eq(arg, "desc") {
            options.sort = Some(Sort::Descending);
        } else if eq(arg, "count") && left >= 1 {
            let count = int(&args[at + 1])?;
            if count <= 0 {
                return Err(err("ERR COUNT must be > 0"));
            }
            options.count = count as u64;
            at += 1;
        } else if (eq(arg, "store") || eq(arg, "storedist")) && left >= 1 && !read_only && !searching {
            options.store = Some(&args[at + 1]);
            options.store_dist = eq(arg, "storedist");
            at += 1;
        } else if eq(arg, "storedist") && kind == Kind::SearchStore {
            options.store_dist = true;
        } else if eq(arg, "frommember") && left >= 1 && searching && !options.from_lonlat {
            if value.is_some() {
                options.center = Some(member_point(ctx, &set, &args[at + 1])?);
            }
            options.from_member = true;
            at += 1;
        } else if eq(arg, "fromlonlat") && left >= 2 && searching && !options.from_member {
            options.center = Some(point_arg(&args[at + 1..at + 3])?);
            options.from_lonlat = true;
            at += 2;
        } else if eq(arg, "byradius")
            && left >= 2
            && searching
            && !matches!(options.shape, Some((Shape::Box { .. }, _)))
        {
            options.shape = Some(radius_arg(&args[at + 1..at + 3])?);
            at += 2;
        } else if eq(arg, "bybox") && left >= 3 && searching && !matches!(options.shape, Some((Shape::Radius(_), _))) {
            options.shape = Some(box_arg(&args[at + 1..at + 4])?);
            at += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        at += 1;
    }
    if options.store.is_some() && (options.with_dist || options.with_hash || options.with_coord) {
        let what = if kind == Kind::SearchStore { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(err(format!("ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options")));
    }
    let name = String::from_utf8_lossy(&args[0]);
    if searching && !options.from_member && !options.from_lonlat {
        return Err(err(format!("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")));
    }
    if searching && options.shape.is_none() {
        return Err(err(format!("ERR exactly one of BYRADIUS and BYBOX can be specified for {name}")));
    }
    if options.any && options.count == 0 {
        return Err(err("ERR the ANY argument requires COUNT argument"));
    }
    let event = if searching { "geosearchstore" } else { "georadiusstore" };
    let (Some(center), Some((shape, to_meters))) = (options.center, options.shape) else {
        // Only a missing set leaves either unknown.
        return reply_or_store(ctx, &options, Vec::new(), 1.0, event);
    };
    let search = Search { center, shape, to_meters };
    let limit = if options.any { options.count as usize } else { 0 };
    let mut found = find(ctx, &set, &search, limit)?;
    // COUNT without ANY means the nearest.
    let sort = match options.sort {
        None if options.count > 0 && !options.any => Sort::Ascending,
        sort => sort.unwrap_or(Sort::None),
    };
    let returned = match options.count {
        0 => found.len(),
        count => found.len().min(usize::try_from(count).unwrap_or(usize::MAX)),
    };
    let cmp = |a: &Found, b: &Found| {
        let order = a.distance.partial_cmp(&b.distance).unwrap_or(Ordering::Equal);
        if sort == Sort::Descending {
            order.reverse()
        } else {
            order
        }
    };
    if sort != Sort::None && returned > 0 {
        // Redis sorts everything with the C library's qsort (a stable
        // merge sort in glibc) and a cut with its own partial quicksort.
        if returned == found.len() {
            found.sort_by(cmp);
        } else {
            crate::pqsort::partial_sort(&mut found, cmp, 0, returned - 1);
        }
    }
    found.truncate(returned);
    reply_or_store(ctx, &options, found, to_meters, event)
}

/// The members of `set` inside the search's shape, box by box, each box in
/// the set's order; with a `limit`, no more once that many are found.
fn find(ctx: &mut Ctx<'_>, set: &Open<'_>, search: &Search, limit: usize) -> Result<Vec<Found>, CmdError> {
    let mut found = Vec::new();
    set.walk_score_ranges(ctx, &search.ranges(), |member, score| {
        if let Some((point, distance)) = search.contains(score) {
            found.push(Found { member: member.to_vec(), score, point, distance });
        }
        limit == 0 || found.len() < limit
    })?;
    Ok(found)
}

/// The search's reply: the members (with what was asked of each), or the
/// count stored at the STORE key.
fn reply_or_store(
    ctx: &mut Ctx<'_>,
    options: &Options<'_>,
    found: Vec<Found>,
    to_meters: f64,
    event: &'static str,
) -> CmdResult {
    if let Some(destination) = options.store {
        // Each box is read once and boxes do not overlap (`Search::ranges`),
        // so each member comes once.
        let members: Vec<(Vec<u8>, f64)> = found
            .into_iter()
            .map(|point| {
                let score = if options.store_dist { point.distance / to_meters } else { point.score };
                (point.member, score)
            })
            .collect();
        store_new_noting(ctx, destination, &members, event)?;
        ctx.out.int(members.len() as i64);
        return Ok(());
    }
    let extras = options.with_dist as usize + options.with_hash as usize + options.with_coord as usize;
    ctx.out.array(found.len());
    for point in found {
        if extras > 0 {
            ctx.out.array(extras + 1);
        }
        ctx.out.bulk(&point.member);
        if options.with_dist {
            ctx.out.bulk(geo::format_distance(point.distance / to_meters).as_bytes());
        }
        if options.with_hash {
            ctx.out.int(point.score as i64);
        }
        if options.with_coord {
            ctx.out.array(2);
            ctx.out.double_text(&geo::format_coordinate(point.point.0));
            ctx.out.double_text(&geo::format_coordinate(point.point.1));
        }
    }
    Ok(())
}

pub fn georadius(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search_command(ctx, args, Kind::Radius, false)
}

pub fn georadius_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search_command(ctx, args, Kind::Radius, true)
}

pub fn georadiusbymember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search_command(ctx, args, Kind::ByMember, false)
}

pub fn georadiusbymember_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search_command(ctx, args, Kind::ByMember, true)
}

pub fn geosearch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search_command(ctx, args, Kind::Search, false)
}

pub fn geosearchstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    search_command(ctx, args, Kind::SearchStore, false)
}
