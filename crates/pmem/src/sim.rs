//! Crash simulator: a memory backend that records write-backs and fences and
//! produces the persistent images a power failure could leave behind.
//!
//! Model (the one PMDK's pmreorder and tools such as Yat and Jaaru check):
//! a store lands in the CPU cache; a cache line reaches the medium when it
//! is written back and a later fence completes, or at any moment the cache
//! decides to evict it. So just before each fence, the medium holds every
//! line fenced earlier plus *any subset* of the lines still in flight:
//! lines written back since the last fence and lines dirtied but not yet
//! written back. The unit is the 64-byte line ("unflushed lines dropped or
//! kept"); a line's candidate content is what it held when it was written
//! back, or its current content if it never was.
//!
//! The page-cache model (`set_page_cache`, which pools turn on in `sync`
//! mode) drops the eviction: a store reaches a disk file only through a
//! write-back (`pwrite`), so only written-back lines are in flight, each
//! independently (an unsynced pwrite can land in part).
//!
//! A test creates a structure on a [`SimMedia`], calls
//! [`SimMedia::start_recording`], runs a workload, then walks
//! [`CrashImages::for_each`]: every image is reopened and checked against
//! the structure's invariants. Images per fence are exhaustive when few
//! lines are in flight and sampled (none, all, each one alone, each one
//! missing, plus seeded random subsets) when many are.

use crate::flush::CACHE_LINE_BYTES;

/// One cache line, aligned as the hardware's is.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct Line([u8; CACHE_LINE_BYTES]);

/// Lines in flight at one fence, and what that fence made durable.
#[derive(Clone)]
struct CrashPoint {
    in_flight: Vec<(u32, Line)>,
    fenced: Vec<(u32, Line)>,
}

/// Simulated persistent memory: what the program sees (`volatile`) and
/// what a power failure would keep (`persistent`).
pub struct SimMedia {
    volatile: Box<[Line]>,
    persistent: Vec<Line>,
    pending: Vec<(u32, Line)>,
    recording: bool,
    initial: Vec<Line>,
    points: Vec<CrashPoint>,
    /// Page-cache model (`sync` on a disk file): a store reaches the medium
    /// only once written back (pwrite), never by eviction.
    page_cache: bool,
}

impl SimMedia {
    /// A zeroed medium of `len_bytes` (rounded up to whole lines).
    pub fn new(len_bytes: usize) -> SimMedia {
        let lines = len_bytes.div_ceil(CACHE_LINE_BYTES);
        SimMedia {
            volatile: vec![Line([0; CACHE_LINE_BYTES]); lines].into_boxed_slice(),
            persistent: Vec::new(),
            pending: Vec::new(),
            recording: false,
            initial: Vec::new(),
            points: Vec::new(),
            page_cache: false,
        }
    }

    /// Switches between the persistent-memory model (a dirty line may reach
    /// the medium at any moment) and the page-cache model (only written-back
    /// lines may, each independently until the next fence).
    pub fn set_page_cache(&mut self, page_cache: bool) {
        self.page_cache = page_cache;
    }

    pub fn is_page_cache(&self) -> bool {
        self.page_cache
    }

    /// A medium holding `image` (a crash image, or a file's bytes) in both
    /// views, not recording.
    pub fn from_image(image: &[u8]) -> SimMedia {
        let mut media = SimMedia::new(image.len());
        media.bytes_mut()[..image.len()].copy_from_slice(image);
        media
    }

    pub fn len(&self) -> usize {
        self.volatile.len() * CACHE_LINE_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.volatile.is_empty()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.volatile.as_mut_ptr().cast()
    }

    /// The bytes the program sees.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `Line` is 64 plain bytes with no padding.
        unsafe { std::slice::from_raw_parts(self.volatile.as_ptr().cast(), self.len()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        // SAFETY: as above, and `&mut self` makes the view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.volatile.as_mut_ptr().cast(), len) }
    }

    /// Treats everything stored so far as durable and starts recording.
    pub fn start_recording(&mut self) {
        self.persistent = self.volatile.to_vec();
        self.initial = self.persistent.clone();
        self.pending.clear();
        self.points.clear();
        self.recording = true;
    }

    /// Fences recorded so far.
    pub fn fences(&self) -> usize {
        self.points.len()
    }

    pub(crate) fn write_back(&mut self, offset: usize, len: usize) {
        if !self.recording || len == 0 {
            return;
        }
        let first = offset / CACHE_LINE_BYTES;
        let last = (offset + len - 1) / CACHE_LINE_BYTES;
        for line in first..=last.min(self.volatile.len() - 1) {
            let content = self.volatile[line];
            match self.pending.iter_mut().find(|(l, _)| *l as usize == line) {
                Some(entry) => entry.1 = content,
                None => self.pending.push((line as u32, content)),
            }
        }
    }

    pub(crate) fn fence(&mut self) {
        if !self.recording {
            return;
        }
        let in_flight = self.in_flight();
        let fenced = std::mem::take(&mut self.pending);
        for (line, content) in &fenced {
            self.persistent[*line as usize] = *content;
        }
        self.points.push(CrashPoint { in_flight, fenced });
    }

    /// Written-back lines not yet fenced, then dirty lines never written back.
    fn in_flight(&self) -> Vec<(u32, Line)> {
        let mut lines = self.pending.clone();
        if self.page_cache {
            return lines;
        }
        for (index, (now, durable)) in self.volatile.iter().zip(&self.persistent).enumerate() {
            if now != durable && !self.pending.iter().any(|(l, _)| *l as usize == index) {
                lines.push((index as u32, *now));
            }
        }
        lines
    }

    /// The images a crash before each recorded fence (and one after the
    /// last) could leave.
    pub fn crash_images(&self) -> CrashImages {
        let mut points = self.points.clone();
        points.push(CrashPoint { in_flight: self.in_flight(), fenced: Vec::new() });
        CrashImages { initial: self.initial.clone(), points }
    }
}

/// Every recorded crash point, replayable into byte images.
pub struct CrashImages {
    initial: Vec<Line>,
    points: Vec<CrashPoint>,
}

/// One image a crash could leave.
pub struct CrashImage<'a> {
    /// The crash happened just before this fence (the last index is "after
    /// the workload, with nothing more fenced").
    pub fence: usize,
    /// Lines in flight at that moment, and how many of them the image kept.
    pub in_flight: usize,
    pub kept: usize,
    pub bytes: &'a [u8],
}

/// How many in-flight lines are enumerated exhaustively (2^n images).
const EXHAUSTIVE_LINES: usize = 4;

impl CrashImages {
    /// Crash points (fences plus the end of the run).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Calls `check` with each image. `random_subsets` seeded random
    /// subsets are added per crash point beyond the systematic ones.
    pub fn for_each(&self, random_subsets: usize, seed: u64, mut check: impl FnMut(&CrashImage<'_>)) {
        let mut durable = self.initial.clone();
        let mut rng = seed | 1;
        let mut image: Vec<Line> = Vec::with_capacity(durable.len());
        for (fence, point) in self.points.iter().enumerate() {
            let n = point.in_flight.len();
            for keep in subsets(n, random_subsets, &mut rng) {
                image.clear();
                image.extend_from_slice(&durable);
                let mut kept = 0;
                for (i, (line, content)) in point.in_flight.iter().enumerate() {
                    if keep(i) {
                        image[*line as usize] = *content;
                        kept += 1;
                    }
                }
                // SAFETY: `Line` is 64 plain bytes with no padding.
                let bytes =
                    unsafe { std::slice::from_raw_parts(image.as_ptr().cast::<u8>(), image.len() * CACHE_LINE_BYTES) };
                check(&CrashImage { fence, in_flight: n, kept, bytes });
            }
            for (line, content) in &point.fenced {
                durable[*line as usize] = *content;
            }
        }
    }
}

/// Subsets of `n` in-flight lines, each as a membership test.
fn subsets(n: usize, random: usize, rng: &mut u64) -> Vec<Box<dyn Fn(usize) -> bool>> {
    let mut out: Vec<Box<dyn Fn(usize) -> bool>> = Vec::new();
    if n <= EXHAUSTIVE_LINES {
        for mask in 0u32..(1 << n) {
            out.push(Box::new(move |i| mask & (1 << i) != 0));
        }
        return out;
    }
    out.push(Box::new(|_| false));
    out.push(Box::new(|_| true));
    for only in 0..n {
        out.push(Box::new(move |i| i == only));
        out.push(Box::new(move |i| i != only));
    }
    for _ in 0..random {
        let bits: Vec<bool> = (0..n).map(|_| next_random(rng) & 1 == 1).collect();
        out.push(Box::new(move |i| bits[i]));
    }
    out
}

/// xorshift64: deterministic, dependency-free, good enough to pick subsets.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(media: &mut SimMedia, offset: usize, byte: u8) {
        media.bytes_mut()[offset] = byte;
    }

    #[test]
    fn fenced_lines_are_in_every_later_image_and_unfenced_ones_in_some() {
        let mut media = SimMedia::new(4 * 64);
        media.start_recording();
        store(&mut media, 0, 1);
        media.write_back(0, 1);
        media.fence(); // fence 0: line 0 in flight
        store(&mut media, 64, 2); // never written back
        store(&mut media, 128, 3);
        media.write_back(128, 1);
        media.fence(); // fence 1: lines 2 (written back) and 1 (dirty) in flight
        let images = media.crash_images();
        assert_eq!(images.len(), 3);
        let mut seen = Vec::new();
        images.for_each(0, 1, |image| seen.push((image.fence, image.bytes[0], image.bytes[64], image.bytes[128])));
        // Before fence 0: line 0 may or may not have reached the medium.
        assert!(seen.contains(&(0, 0, 0, 0)) && seen.contains(&(0, 1, 0, 0)));
        // After fence 0 the byte at 0 is always there; lines 1 and 2 vary freely.
        assert!(seen.iter().filter(|s| s.0 >= 1).all(|s| s.1 == 1));
        for combo in [(0, 0), (2, 0), (0, 3), (2, 3)] {
            assert!(seen.contains(&(1, 1, combo.0, combo.1)), "{combo:?}");
        }
        // After the last fence line 2 is durable; line 1 is still in flight.
        assert!(seen.iter().filter(|s| s.0 == 2).all(|s| s.3 == 3));
        assert!(seen.contains(&(2, 1, 0, 3)) && seen.contains(&(2, 1, 2, 3)));
    }

    #[test]
    fn many_lines_in_flight_are_sampled_not_enumerated() {
        let mut media = SimMedia::new(64 * 64);
        media.start_recording();
        for line in 0..20 {
            store(&mut media, line * 64, 9);
        }
        media.fence();
        let mut count = 0;
        media.crash_images().for_each(5, 7, |image| {
            if image.fence == 0 {
                count += 1;
            }
        });
        assert_eq!(count, 2 + 2 * 20 + 5);
    }
}
