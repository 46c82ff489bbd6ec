//! An answer's chunks, as they arrived from the provider, carried to the agent as one
//! frame: hyper writes a frame under one chunk header with one `writev`, the chunks
//! in place (no copy). hyper hands a body on one chunk of the provider's at a time, and
//! a close-delimited body in pieces of at most 8 KiB; written one frame each, a fast
//! answer cost the door a write per piece.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// The most chunks one frame holds: what one `writev` takes, less hyper's chunk header
/// and trailer (its own limit is 64 slices).
pub const MAX_SEGMENTS: usize = 60;
/// The most bytes one frame holds, so that a frame never waits on more than a pipe's
/// worth of the agent's reading.
pub const MAX_BYTES: usize = 1 << 20;

/// Chunks to be written in order, as one buffer.
#[derive(Debug, Default)]
pub struct Segments {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Segments {
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.remaining += chunk.len();
            self.parts.push_back(chunk);
        }
    }

    /// Whether another chunk may join the frame.
    pub fn has_room(&self) -> bool {
        self.parts.len() < MAX_SEGMENTS && self.remaining < MAX_BYTES
    }
}

impl From<Bytes> for Segments {
    fn from(chunk: Bytes) -> Self {
        let mut segments = Segments::default();
        segments.push(chunk);
        segments
    }
}

impl Buf for Segments {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |part| part.as_ref())
    }

    /// Past the end, it is empty (rather than the panic `Buf` allows).
    fn advance(&mut self, mut count: usize) {
        while count > 0 {
            let Some(front) = self.parts.front_mut() else { break };
            if count < front.len() {
                front.advance(count);
                self.remaining -= count;
                return;
            }
            count -= front.len();
            self.remaining -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slice, part) in slices.iter_mut().zip(&self.parts) {
            *slice = IoSlice::new(part);
            filled += 1;
        }
        filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(parts: &[&'static [u8]]) -> Segments {
        let mut segments = Segments::default();
        for part in parts {
            segments.push(Bytes::from_static(part));
        }
        segments
    }

    #[test]
    fn reads_back_what_was_pushed_in_order_however_it_is_advanced() {
        let whole = b"event: a\ndata: {}\n\nevent: b\n";
        for step in 1..=whole.len() {
            let mut segments = of(&[b"event: a\n", b"", b"data: {}\n\n", b"event: b\n"]);
            let mut read = Vec::new();
            while segments.has_remaining() {
                let n = step.min(segments.chunk().len());
                read.extend_from_slice(&segments.chunk()[..n]);
                segments.advance(n);
            }
            assert_eq!(read, whole, "step {step}");
        }
    }

    #[test]
    fn gives_every_part_as_a_slice_and_no_empty_ones() {
        let segments = of(&[b"ab", b"", b"cd", b"e"]);
        let mut slices = [IoSlice::new(&[]); 8];
        let filled = segments.chunks_vectored(&mut slices);
        let joined: Vec<u8> = slices[..filled].iter().flat_map(|s| s.to_vec()).collect();
        assert_eq!((filled, joined.as_slice()), (3, &b"abcde"[..]));
        // Fewer slices than parts: the first ones, in order.
        let mut two = [IoSlice::new(&[]); 2];
        assert_eq!(segments.chunks_vectored(&mut two), 2);
        assert_eq!(&*two[1], b"cd");
    }

    #[test]
    fn advancing_past_the_end_leaves_it_empty() {
        let mut segments = of(&[b"abc", b"de"]);
        segments.advance(4);
        assert_eq!(segments.chunk(), b"e");
        segments.advance(100);
        assert_eq!((segments.remaining(), segments.chunk()), (0, &b""[..]));
    }

    #[test]
    fn a_frame_is_bounded_in_parts_and_in_bytes() {
        let mut segments = Segments::default();
        while segments.has_room() {
            segments.push(Bytes::from_static(b"x"));
        }
        assert_eq!(segments.parts.len(), MAX_SEGMENTS);
        let big = Segments::from(Bytes::from(vec![0u8; MAX_BYTES]));
        assert!(!big.has_room());
    }
}
