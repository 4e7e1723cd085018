//! The geohash arithmetic behind the GEO commands, as Redis 7.0 does it:
//! a point is a sorted set member whose score is its 52-bit geohash
//! (latitude bits at even positions, longitude bits at odd ones, over
//! Redis's latitude range of ±85.05112878°), and a search reads the nine
//! geohash boxes around the centre, each one score range, keeping the
//! points inside the shape. Every step is the same floating-point
//! expression in the same order as Redis's, so the same points fall in,
//! with the same distances and coordinates to the last digit (the
//! trigonometry is the same glibc's).

pub const LON_MIN: f64 = -180.0;
pub const LON_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
/// 26 bits a coordinate: 52 bits, all a double's mantissa holds.
const STEP_MAX: u8 = 26;
/// Earth's quadratic mean radius in the WGS-84 model, as Redis takes it.
const EARTH_RADIUS: f64 = 6372797.560856;
/// Half the Mercator projection's width: a radius this wide needs no bits.
const MERCATOR_MAX: f64 = 20037726.37;
const DEG_TO_RAD: f64 = std::f64::consts::PI / 180.0;

/// The ranges a hash's bits split in halves: Redis's own (latitude within
/// the Mercator projection's) for scores, the standard ones for GEOHASH.
#[derive(Clone, Copy)]
struct Ranges {
    lat: (f64, f64),
    lon: (f64, f64),
}

const REDIS_RANGES: Ranges = Ranges { lat: (LAT_MIN, LAT_MAX), lon: (LON_MIN, LON_MAX) };
const STANDARD_RANGES: Ranges = Ranges { lat: (-90.0, 90.0), lon: (LON_MIN, LON_MAX) };

/// A geohash of `step` bits a coordinate; `step` 0 is no box at all.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Hash {
    bits: u64,
    step: u8,
}

const NO_BOX: Hash = Hash { bits: 0, step: 0 };

/// Spreads the low 32 bits of `v` to the even bit positions.
fn spread(v: u32) -> u64 {
    let mut x = v as u64;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The bits at even positions of `x`, packed.
fn gather(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

/// Whether Redis accepts the point at all (GEOADD's check).
pub fn valid(lon: f64, lat: f64) -> bool {
    (LON_MIN..=LON_MAX).contains(&lon) && (LAT_MIN..=LAT_MAX).contains(&lat)
}

fn encode(ranges: Ranges, lon: f64, lat: f64, step: u8) -> Hash {
    let scale = (1u64 << step) as f64;
    let lat_offset = (lat - ranges.lat.0) / (ranges.lat.1 - ranges.lat.0) * scale;
    let lon_offset = (lon - ranges.lon.0) / (ranges.lon.1 - ranges.lon.0) * scale;
    // C's conversion to uint32_t truncates, as `as` does within range.
    Hash { bits: spread(lat_offset as u32) | (spread(lon_offset as u32) << 1), step }
}

/// The box a hash names: (longitude min, max), (latitude min, max).
#[derive(Clone, Copy, Debug)]
struct Area {
    lon: (f64, f64),
    lat: (f64, f64),
}

fn area(ranges: Ranges, hash: Hash) -> Area {
    let cells = (1u64 << hash.step) as f64;
    // The next cell's index is a 32-bit sum in Redis (it wraps for a score
    // that is not a point).
    let span = |cell: u32, (min, max): (f64, f64)| {
        (min + (cell as f64 / cells) * (max - min), min + (cell.wrapping_add(1) as f64 / cells) * (max - min))
    };
    Area { lat: span(gather(hash.bits), ranges.lat), lon: span(gather(hash.bits >> 1), ranges.lon) }
}

/// The score Redis gives a point.
pub fn score(lon: f64, lat: f64) -> f64 {
    encode(REDIS_RANGES, lon, lat, STEP_MAX).bits as f64
}

/// A score's bits as C's `(uint64_t)` conversion gives them on x86-64, so
/// that a member that is not a point (a negative or huge score) decodes to
/// where Redis puts it.
fn score_bits(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let truncate = |x: f64| if (-TWO_63..TWO_63).contains(&x) { x as i64 as u64 } else { 1 << 63 };
    if score < TWO_63 {
        truncate(score)
    } else {
        truncate(score - TWO_63) ^ (1 << 63)
    }
}

/// The point a score stands for (its box's centre): (longitude, latitude).
pub fn decode(score: f64) -> (f64, f64) {
    let box_ = area(REDIS_RANGES, Hash { bits: score_bits(score), step: STEP_MAX });
    let lon = ((box_.lon.0 + box_.lon.1) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((box_.lat.0 + box_.lat.1) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The 11-character standard geohash of a score's point (GEOHASH): its
/// 52 bits re-encoded over the standard latitude range, the last
/// character always `0` as Redis writes it.
pub fn standard_geohash(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = decode(score);
    let bits = encode(STANDARD_RANGES, lon, lat, STEP_MAX).bits;
    let mut text = [b'0'; 11];
    for (i, c) in text.iter_mut().take(10).enumerate() {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    text
}

fn radians(degrees: f64) -> f64 {
    degrees * DEG_TO_RAD
}

fn degrees(radians: f64) -> f64 {
    radians / DEG_TO_RAD
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS * (radians(lat2) - radians(lat1)).abs()
}

/// Metres between two points on the great circle (haversine), as Redis
/// computes it: along the meridian when the longitudes' sine is 0.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = ((radians(lon2) - radians(lon1)) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1, lat2) = (radians(lat1), radians(lat2));
    let u = ((lat2 - lat1) / 2.0).sin();
    let a = u * u + lat1.cos() * lat2.cos() * v * v;
    2.0 * EARTH_RADIUS * a.sqrt().asin()
}

/// A unit's metres (m, km, ft, mi in any case).
pub fn unit(arg: &[u8]) -> Option<f64> {
    Some(match arg.to_ascii_lowercase().as_slice() {
        b"m" => 1.0,
        b"km" => 1000.0,
        b"ft" => 0.3048,
        b"mi" => 1609.34,
        _ => return None,
    })
}

/// The area a search covers, in its unit.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// A search: the shape around `center` (longitude, latitude), its sizes in
/// the unit of `to_meters`.
#[derive(Clone, Copy, Debug)]
pub struct Search {
    pub center: (f64, f64),
    pub shape: Shape,
    pub to_meters: f64,
}

impl Search {
    /// The score ranges `[min, max)` to read, in Redis's order: the
    /// centre's box, then north, south, east, west, north-east, north-west,
    /// south-east, south-west, each left out where the shape cannot reach
    /// and where it repeats the one read before it.
    pub fn ranges(&self) -> Vec<(f64, f64)> {
        let mut ranges = Vec::with_capacity(9);
        // At one bit a coordinate east is west, north-east north-west ...:
        // Redis skips a box equal to the last one read (but the centre's,
        // which no neighbour can equal).
        let mut last: Option<Hash> = None;
        for (i, hash) in self.boxes().into_iter().enumerate() {
            if hash == NO_BOX || last == Some(hash) {
                continue;
            }
            let shift = 52 - 2 * hash.step as u32;
            ranges.push(((hash.bits << shift) as f64, ((hash.bits + 1) << shift) as f64));
            last = (i > 0).then_some(hash);
        }
        ranges
    }

    /// The bounding box: (longitude min, latitude min, longitude max,
    /// latitude max), wider at the edge nearer a pole.
    fn bounds(&self) -> [f64; 4] {
        let (lon, lat) = self.center;
        let (half_height, half_width) = match self.shape {
            Shape::Radius(r) => (self.to_meters * r, self.to_meters * r),
            Shape::Box { width, height } => (self.to_meters * (height / 2.0), self.to_meters * (width / 2.0)),
        };
        let lat_delta = degrees(half_height / EARTH_RADIUS);
        let lon_delta_top = degrees(half_width / EARTH_RADIUS / radians(lat + lat_delta).cos());
        let lon_delta_bottom = degrees(half_width / EARTH_RADIUS / radians(lat - lat_delta).cos());
        let lon_delta = if lat < 0.0 { lon_delta_bottom } else { lon_delta_top };
        [lon - lon_delta, lat - lat_delta, lon + lon_delta, lat + lat_delta]
    }

    fn boxes(&self) -> [Hash; 9] {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounds();
        let (lon, lat) = self.center;
        let reach = match self.shape {
            Shape::Radius(r) => r,
            Shape::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
        } * self.to_meters;
        let mut step = steps_for(reach, lat);
        let mut hash = encode(REDIS_RANGES, lon, lat, step);
        let mut around = neighbours(hash);
        // Near a box's edge the estimate can leave the shape poking out of
        // the nine boxes: one step coarser then.
        let [north, south, east, west, ..] = around.map(|h| area(REDIS_RANGES, h));
        let short = north.lat.1 < max_lat || south.lat.0 > min_lat || east.lon.1 < max_lon || west.lon.0 > min_lon;
        if step > 1 && short {
            step -= 1;
            hash = encode(REDIS_RANGES, lon, lat, step);
            around = neighbours(hash);
        }
        let centre = area(REDIS_RANGES, hash);
        let [mut n, mut s, mut e, mut w, mut ne, mut nw, mut se, mut sw] = around;
        if step >= 2 {
            if centre.lat.0 < min_lat {
                (s, sw, se) = (NO_BOX, NO_BOX, NO_BOX);
            }
            if centre.lat.1 > max_lat {
                (n, ne, nw) = (NO_BOX, NO_BOX, NO_BOX);
            }
            if centre.lon.0 < min_lon {
                (w, sw, nw) = (NO_BOX, NO_BOX, NO_BOX);
            }
            if centre.lon.1 > max_lon {
                (e, se, ne) = (NO_BOX, NO_BOX, NO_BOX);
            }
        }
        [hash, n, s, e, w, ne, nw, se, sw]
    }

    /// The point a score stands for and its distance from the centre in
    /// metres, if it lies in the shape.
    pub fn contains(&self, score: f64) -> Option<((f64, f64), f64)> {
        let (lon, lat) = decode(score);
        let (clon, clat) = self.center;
        let distance = match self.shape {
            Shape::Radius(r) => Some(distance(clon, clat, lon, lat)).filter(|&d| d <= r * self.to_meters),
            Shape::Box { width, height } => {
                let (width, height) = (width * self.to_meters, height * self.to_meters);
                (lat_distance(lat, clat) <= height / 2.0 && distance(lon, lat, clon, lat) <= width / 2.0)
                    .then(|| distance(clon, clat, lon, lat))
            }
        }?;
        Some(((lon, lat), distance))
    }
}

/// How many bits a coordinate for boxes that cover `meters` around a point
/// at latitude `lat`.
fn steps_for(mut meters: f64, lat: f64) -> u8 {
    if meters == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while meters < MERCATOR_MAX {
        meters *= 2.0;
        step += 1;
    }
    // Two fewer, so that the radius fits in most cases; fewer still near
    // the poles, where a box narrows.
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, STEP_MAX as i32) as u8
}

/// Moves a hash one box along longitude (odd bits) or latitude (even bits).
fn step_along(hash: Hash, odd: bool, forward: bool) -> Hash {
    let width = 64 - 2 * hash.step as u32;
    let (own_mask, other_mask) = if odd {
        (0xAAAA_AAAA_AAAA_AAAAu64, 0x5555_5555_5555_5555u64)
    } else {
        (0x5555_5555_5555_5555, 0xAAAA_AAAA_AAAA_AAAA)
    };
    let own = hash.bits & own_mask;
    let other = hash.bits & other_mask;
    // The other coordinate's bits, set, carry an addition across them.
    let filler = other_mask.checked_shr(width).unwrap_or(0);
    let moved = if forward { own.wrapping_add(filler + 1) } else { (own | filler).wrapping_sub(filler + 1) };
    Hash { bits: (moved & own_mask.checked_shr(width).unwrap_or(0)) | other, step: hash.step }
}

/// North, south, east, west, north-east, north-west, south-east, south-west.
fn neighbours(hash: Hash) -> [Hash; 8] {
    let lon = |h: Hash, forward| step_along(h, true, forward);
    let lat = |h: Hash, forward| step_along(h, false, forward);
    [
        lat(hash, true),
        lat(hash, false),
        lon(hash, true),
        lon(hash, false),
        lat(lon(hash, true), true),
        lat(lon(hash, false), true),
        lat(lon(hash, true), false),
        lat(lon(hash, false), false),
    ]
}

/// A distance as Redis replies it: rounded to four decimals (ties to even,
/// as `llrint`).
pub fn format_distance(meters: f64) -> String {
    if meters == 0.0 {
        return "0.0000".into();
    }
    let scaled = (meters * 10_000.0).round_ties_even() as i64;
    let sign = if scaled < 0 { "-" } else { "" };
    let scaled = scaled.unsigned_abs();
    format!("{sign}{}.{:04}", scaled / 10_000, scaled % 10_000)
}

/// A coordinate as Redis replies it: 17 decimals, trailing zeros cut.
pub fn format_coordinate(value: f64) -> String {
    let mut text = format!("{value:.17}");
    if text.contains('.') {
        let kept = text.trim_end_matches('0').trim_end_matches('.').len();
        text.truncate(kept);
    }
    if text == "-0" {
        text = "0".into();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spreading_and_gathering_bits_are_inverse() {
        for v in [0u32, 1, 0xFFFF_FFFF, 0x0355_5555, 0x8000_0001] {
            assert_eq!(gather(spread(v)), v);
            assert_eq!(gather(spread(v) << 1 >> 1), v);
        }
        assert_eq!(spread(0b111), 0b10101);
    }

    /// Palermo and Catania, the points of Redis's documentation: their
    /// scores, positions, hashes and distance as redis-server 7.0 answers.
    #[test]
    fn known_points_match_redis() {
        let palermo = score(13.361389, 38.115556);
        let catania = score(15.087269, 37.502669);
        assert_eq!(palermo, 3479099956230698.0);
        assert_eq!(catania, 3479447370796909.0);
        let (lon, lat) = decode(palermo);
        assert_eq!(format_coordinate(lon), "13.36138933897018433");
        assert_eq!(format_coordinate(lat), "38.11555639549629859");
        assert_eq!(&standard_geohash(palermo), b"sqc8b49rny0");
        assert_eq!(&standard_geohash(catania), b"sqdtr74hyu0");
        let (lon2, lat2) = decode(catania);
        assert_eq!(format_distance(distance(lon, lat, lon2, lat2)), "166274.1516");
        assert_eq!(format_distance(distance(lon, lat, lon2, lat2) / 1000.0), "166.2742");
    }

    #[test]
    fn distances_round_as_redis_prints_them() {
        assert_eq!(format_distance(0.0), "0.0000");
        assert_eq!(format_distance(0.00001), "0.0000");
        assert_eq!(format_distance(0.5), "0.5000");
        assert_eq!(format_distance(12.34565), "12.3456");
        assert_eq!(format_distance(1234567.0), "1234567.0000");
        assert_eq!(format_coordinate(0.0), "0");
        assert_eq!(format_coordinate(-0.0), "0");
        assert_eq!(format_coordinate(180.0), "180");
        assert_eq!(format_coordinate(-1.5), "-1.5");
    }

    /// Scores that are not points decode where x86-64's conversion puts them.
    #[test]
    fn odd_scores_convert_as_c_does() {
        assert_eq!(score_bits(-1.5), u64::MAX);
        assert_eq!(score_bits(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(score_bits(f64::INFINITY), 0);
        assert_eq!(score_bits(1e19), 10_000_000_000_000_000_000);
        assert_eq!(score_bits(2.5), 2);
    }

    proptest! {
        /// A point's score decodes to within its 52-bit box, and the centre's
        /// own box is among the ranges a search reads.
        #[test]
        fn points_round_trip_and_are_searched(lon in -180.0f64..=180.0, lat in LAT_MIN..=LAT_MAX, r in 1.0f64..5e6) {
            let s = score(lon, lat);
            prop_assert!(s < (1u64 << 52) as f64 + 1.0);
            let (dlon, dlat) = decode(s);
            prop_assert!((dlon - lon).abs() < 1e-5 && (dlat - lat).abs() < 1e-5);
            let search = Search { center: (lon, lat), shape: Shape::Radius(r), to_meters: 1.0 };
            prop_assert!(search.ranges().iter().any(|&(min, max)| min <= s && s < max));
            prop_assert!(search.contains(s).is_some());
        }

        #[test]
        fn a_step_forward_and_back_is_no_move(bits in 0u64..(1 << 40), step in 1u8..=20, odd: bool) {
            let hash = Hash { bits: bits & ((1u64 << (2 * step)) - 1), step };
            let there = step_along(hash, odd, true);
            prop_assert_eq!(step_along(there, odd, false), hash);
        }
    }
}
