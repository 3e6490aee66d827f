//! Newline-delimited framing: splits a byte stream into lines, one JSON message per line.
//!
//! Owns the read buffer. It starts small (a server holds thousands of mostly idle
//! connections) and doubles while reads fill it, up to a busy stream's chunk size. Newlines are
//! found with `memchr` over whole chunks; a line is handed out as a slice of the buffer (no
//! copy). A line longer than the limit is buffered only up to
//! the limit, then skipped up to its newline and reported as [`Frame::Oversized`], and the
//! buffer shrinks back afterwards, so one huge message costs neither lasting memory nor the
//! connection. `\r\n` endings lose their `\r`; lines that are empty
//! or only whitespace are skipped. A last line without a newline before end of input still
//! counts.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The default limit on one line: 64 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The buffer's size at the start: what a connection that only ever sees small messages
/// keeps (a server holds thousands of idle ones).
const START_CAPACITY: usize = 4 * 1024;

/// The buffer of a busy stream: a read that fills the whole buffer doubles it, up to this, so
/// a stream of many messages is read in large chunks.
const BUSY_CAPACITY: usize = 64 * 1024;

/// A buffer grown beyond this goes back to the busy size once it is no longer needed: one
/// huge message must not pin its size for the rest of the connection, and lines a little over
/// the initial size do not reallocate every time.
const SHRINK_ABOVE: usize = 4 * BUSY_CAPACITY;

/// "No longer needed": while an oversized line is skipped, or after this many lines in a row
/// that fit the busy size. A stream of large lines (file contents, images) keeps its buffer
/// instead of shrinking and growing again for every line.
const SHRINK_AFTER_SMALL_LINES: u32 = 16;

/// One item of the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// One line, without its `\n` (nor `\r`); never empty or whitespace only.
    Line(&'a [u8]),
    /// A line longer than the limit was skipped; `len` is its length in bytes.
    Oversized {
        /// How many bytes the line had (its newline excluded).
        len: u64,
    },
}

/// Reads [`Frame`]s from any [`AsyncRead`].
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// End of the valid bytes in `buf`.
    end: usize,
    /// Bytes in `buf[start..scanned]` hold no newline (saves rescanning).
    scanned: usize,
    max: usize,
    /// Skipping an oversized line: bytes dropped so far.
    discarding: Option<u64>,
    /// Lines in a row that fit the busy size (see [`SHRINK_AFTER_SMALL_LINES`]).
    small_lines: u32,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// A reader with the given line limit (in bytes, newline excluded; at least 1).
    pub fn new(inner: R, max_line_bytes: usize) -> Self {
        let max = max_line_bytes.max(1);
        LineReader {
            inner,
            buf: vec![0; START_CAPACITY.min(max.saturating_add(1))],
            start: 0,
            end: 0,
            scanned: 0,
            max,
            discarding: None,
            small_lines: 0,
            eof: false,
        }
    }

    /// The next frame, or `None` at end of input. Cancel safe: dropping the future loses no
    /// bytes (all state lives in `self`).
    pub async fn next_frame(&mut self) -> io::Result<Option<Frame<'_>>> {
        loop {
            if let Some(pos) = memchr::memchr(b'\n', &self.buf[self.scanned..self.end]) {
                let nl = self.scanned + pos;
                let line_start = self.start;
                self.start = nl + 1;
                self.scanned = self.start;
                self.small_lines =
                    if nl - line_start <= BUSY_CAPACITY / 2 { self.small_lines.saturating_add(1) } else { 0 };
                if let Some(dropped) = self.discarding.take() {
                    return Ok(Some(Frame::Oversized { len: dropped + (nl - line_start) as u64 }));
                }
                let line = trim_cr(&self.buf[line_start..nl]);
                if line.len() > self.max {
                    return Ok(Some(Frame::Oversized { len: (nl - line_start) as u64 }));
                }
                if is_blank(line) {
                    continue;
                }
                // Re-borrow to hand out the slice (the borrow checker cannot see through the
                // loop otherwise).
                let line = trim_cr(&self.buf[line_start..nl]);
                return Ok(Some(Frame::Line(line)));
            }
            self.scanned = self.end;
            let pending = self.end - self.start;
            if let Some(dropped) = self.discarding.as_mut() {
                // Still inside an oversized line: drop what we have and keep looking.
                *dropped += pending as u64;
                self.start = 0;
                self.end = 0;
                self.scanned = 0;
            } else if pending > self.max.saturating_add(1) {
                // (`+ 1`: a line of exactly `max` bytes may still be followed by its `\r`.)
                self.discarding = Some(pending as u64);
                self.start = 0;
                self.end = 0;
                self.scanned = 0;
            }
            if self.eof {
                return Ok(self.finish());
            }
            self.make_room();
            let free = self.buf.len() - self.end;
            let n = self.inner.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                self.eof = true;
            } else {
                self.end += n;
            }
            let busy = BUSY_CAPACITY.min(self.max.saturating_add(2));
            if n == free && self.buf.len() < busy {
                // The source had a buffer full (at least): read in larger chunks from now on.
                let new_len = self.buf.len().saturating_mul(2).min(busy);
                self.buf.reserve_exact(new_len - self.buf.len());
                self.buf.resize(new_len, 0);
            }
        }
    }

    /// End of input: a last unterminated line still counts.
    fn finish(&mut self) -> Option<Frame<'_>> {
        if let Some(dropped) = self.discarding.take() {
            return Some(Frame::Oversized { len: dropped });
        }
        let (start, end) = (self.start, self.end);
        self.start = end;
        self.scanned = end;
        let line = trim_cr(&self.buf[start..end]);
        if line.is_empty() || is_blank(line) {
            return None;
        }
        if line.len() > self.max {
            return Some(Frame::Oversized { len: line.len() as u64 });
        }
        Some(Frame::Line(line))
    }

    /// Ensures free space after `end`: moves the pending bytes to the front, or grows the
    /// buffer (up to the limit plus the newline; beyond that we are discarding anyway). A
    /// buffer that grew for long lines shrinks back once it is no longer needed (see
    /// [`SHRINK_AFTER_SMALL_LINES`]) and little of it is still pending.
    fn make_room(&mut self) {
        let pending = self.end - self.start;
        let unneeded = self.discarding.is_some() || self.small_lines >= SHRINK_AFTER_SMALL_LINES;
        if self.buf.len() > SHRINK_ABOVE && pending <= BUSY_CAPACITY / 2 && unneeded {
            let mut buf = vec![0; BUSY_CAPACITY.min(self.max.saturating_add(1))];
            buf[..pending].copy_from_slice(&self.buf[self.start..self.end]);
            self.buf = buf;
            self.scanned -= self.start;
            self.start = 0;
            self.end = pending;
            return;
        }
        if self.end < self.buf.len() {
            // Still space; but compact when the consumed prefix dominates, so reads stay big.
            if self.start > 0 && self.start >= self.buf.len() / 2 {
                self.compact();
            }
            return;
        }
        if self.start > 0 {
            self.compact();
            return;
        }
        let cap = self.max.saturating_add(2);
        let new_len = self.buf.len().saturating_mul(2).min(cap).max(self.buf.len() + 1);
        // Exactly: `resize` alone may double the capacity once more, to about twice the limit.
        self.buf.reserve_exact(new_len - self.buf.len());
        self.buf.resize(new_len, 0);
    }

    fn compact(&mut self) {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.scanned -= self.start;
        self.start = 0;
    }

    /// The wrapped reader.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, u64>> {
        let mut r = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(f) = r.next_frame().await.unwrap() {
            out.push(match f {
                Frame::Line(l) => Ok(l.to_vec()),
                Frame::Oversized { len } => Err(len),
            });
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_skips_blank_ones() {
        let f = frames(b"a\r\n\n  \r\nbb\nccc", 10).await;
        assert_eq!(f, vec![Ok(b"a".to_vec()), Ok(b"bb".to_vec()), Ok(b"ccc".to_vec())]);
    }

    #[tokio::test]
    async fn discards_oversized_lines_and_goes_on() {
        let mut input = vec![b'x'; 1000];
        input.extend_from_slice(b"\nok\n");
        input.extend(vec![b'y'; 50]);
        let f = frames(&input, 10).await;
        assert_eq!(f, vec![Err(1000), Ok(b"ok".to_vec()), Err(50)]);
    }

    #[tokio::test]
    async fn exact_limit_passes() {
        let f = frames(b"0123456789\n0123456789\r\n01234567890\n", 10).await;
        assert_eq!(f, vec![Ok(b"0123456789".to_vec()), Ok(b"0123456789".to_vec()), Err(11)]);
    }

    /// Random line lengths (some over the limit), random CRLF, random read sizes: the framer
    /// agrees with a naive reference splitter.
    #[tokio::test]
    async fn agrees_with_a_reference_splitter_on_random_input() {
        use tokio::io::AsyncWriteExt;
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..30 {
            let max = 1 + rand(300) as usize;
            let mut input = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..200 {
                let len = rand(max as u64 * 2 + 2) as usize;
                let line: Vec<u8> = (0..len).map(|i| b"abc xyz{}"[(i + round) % 9]).collect();
                let crlf = rand(4) == 0;
                input.extend_from_slice(&line);
                input.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
                if len > max {
                    // The framer counts the `\r` of an oversized line; the reference does too.
                    expected.push(Err((len + usize::from(crlf)) as u64));
                } else if !is_blank(&line) {
                    expected.push(Ok(line));
                }
            }
            let (mut w, r) = tokio::io::duplex(1 + rand(97) as usize);
            let chunks: Vec<usize> = (0..input.len()).map(|_| 1 + rand(500) as usize).collect();
            let writer = tokio::spawn(async move {
                let mut rest = &input[..];
                for c in chunks {
                    if rest.is_empty() {
                        break;
                    }
                    let n = c.min(rest.len());
                    w.write_all(&rest[..n]).await.unwrap();
                    rest = &rest[n..];
                }
            });
            let mut reader = LineReader::new(r, max);
            let mut got = Vec::new();
            while let Some(f) = reader.next_frame().await.unwrap() {
                got.push(match f {
                    Frame::Line(l) => Ok(l.to_vec()),
                    Frame::Oversized { len } => Err(len),
                });
            }
            writer.await.unwrap();
            assert_eq!(got, expected, "round {round}, max {max}");
        }
    }

    #[tokio::test]
    async fn the_buffer_starts_small_and_grows_for_a_busy_stream() {
        use tokio::io::AsyncWriteExt;
        let (mut w, r) = tokio::io::duplex(1 << 20);
        let mut reader = LineReader::new(r, DEFAULT_MAX_LINE_BYTES);
        // A connection that only sees small messages, one at a time, keeps the small buffer.
        for _ in 0..100 {
            w.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n").await.unwrap();
            assert!(matches!(reader.next_frame().await.unwrap(), Some(Frame::Line(_))));
        }
        assert_eq!(reader.buf.len(), START_CAPACITY);
        // Many messages waiting at once: reads fill the buffer, which doubles up to the busy size.
        let line = [b'a'; 99];
        for _ in 0..5_000 {
            w.write_all(&line).await.unwrap();
            w.write_all(b"\n").await.unwrap();
        }
        for _ in 0..5_000 {
            assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(&line[..])));
        }
        assert_eq!(reader.buf.len(), BUSY_CAPACITY);
    }

    #[tokio::test]
    async fn a_large_line_outgrows_the_small_start_buffer_and_arrives_byte_for_byte() {
        use tokio::io::AsyncWriteExt;
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let mut reader = LineReader::new(r, DEFAULT_MAX_LINE_BYTES);
        assert_eq!(reader.buf.len(), START_CAPACITY);
        // 1 MiB (256 times the start size) with no short period, so that a chunk copied to the
        // wrong place or twice would show; multi-byte UTF-8 (3 bytes) straddles every boundary.
        let big: Vec<u8> = (0..1usize << 20)
            .map(|i| (i * 31 + i / 4093) % 97)
            .flat_map(|k| if k == 0 { "✓".bytes().collect::<Vec<_>>() } else { vec![b'!' + (k % 90) as u8] })
            .collect();
        let expected = big.clone();
        let writer = tokio::spawn(async move {
            w.write_all(b"{\"before\":1}\n").await.unwrap();
            w.write_all(&big).await.unwrap();
            w.write_all(b"\r\n{\"after\":2}\n").await.unwrap();
            w
        });
        assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(&b"{\"before\":1}"[..])));
        match reader.next_frame().await.unwrap() {
            // (Not `assert_eq!`: a failure would print two megabytes.)
            Some(Frame::Line(line)) => assert!(line == &expected[..], "the large line differs"),
            other => panic!("expected the large line, got {:?}", other.map(|_| "another frame")),
        }
        assert!(reader.buf.len() > expected.len(), "grown to hold the line: {}", reader.buf.len());
        assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(&b"{\"after\":2}"[..])));
        drop(writer.await.unwrap());
        assert_eq!(reader.next_frame().await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_buffer_grows_no_further_than_the_limit_and_shrinks_after_a_long_line() {
        use tokio::io::AsyncWriteExt;
        const MAX: usize = 1 << 20;
        let (mut w, r) = tokio::io::duplex(8 << 20);
        let mut reader = LineReader::new(r, MAX);

        // A line of exactly the limit: the buffer holds it, and no more than that.
        w.write_all(&[b'a'; MAX]).await.unwrap();
        w.write_all(b"\n").await.unwrap();
        assert!(matches!(reader.next_frame().await.unwrap(), Some(Frame::Line(l)) if l.len() == MAX));
        assert!(reader.buf.capacity() <= MAX + 2, "capacity {}", reader.buf.capacity());
        // It stays while long lines may follow, and goes after a run of small ones.
        w.write_all(b"ok\n").await.unwrap();
        assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(b"ok")));
        assert!(reader.buf.capacity() > SHRINK_ABOVE, "capacity {}", reader.buf.capacity());
        for _ in 0..SHRINK_AFTER_SMALL_LINES {
            w.write_all(b"ok\n").await.unwrap();
            assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(b"ok")));
        }
        w.write_all(b"ok\n").await.unwrap();
        assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(b"ok")));
        assert!(reader.buf.capacity() <= BUSY_CAPACITY, "capacity {}", reader.buf.capacity());

        // An oversized line: skipped in small pieces, and the buffer is small afterwards.
        w.write_all(&vec![b'x'; 3 * MAX]).await.unwrap();
        w.write_all(b"\nok\n").await.unwrap();
        assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Oversized { len: 3 * MAX as u64 }));
        assert_eq!(reader.next_frame().await.unwrap(), Some(Frame::Line(b"ok")));
        assert!(reader.buf.capacity() <= BUSY_CAPACITY, "capacity {}", reader.buf.capacity());
    }

    #[tokio::test]
    async fn long_lines_across_many_reads() {
        // A pipe delivers bytes in small pieces; lines larger than the initial buffer grow it.
        let (mut w, r) = tokio::io::duplex(7);
        let line = vec![b'z'; 200_000];
        let expected = line.clone();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for _ in 0..3 {
                w.write_all(&line).await.unwrap();
                w.write_all(b"\n").await.unwrap();
            }
        });
        let mut r = LineReader::new(r, 1 << 20);
        for _ in 0..3 {
            match r.next_frame().await.unwrap() {
                Some(Frame::Line(l)) => assert_eq!(l, &expected[..]),
                other => panic!("{other:?}"),
            }
        }
        writer.await.unwrap();
        assert_eq!(r.next_frame().await.unwrap(), None);
    }
}
