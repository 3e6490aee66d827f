//! Reading a `text/event-stream` body into the data of its events: the part of the SSE format
//! (WHATWG HTML, "Server-sent events", parsing an event stream) that the remote transport uses.
//!
//! - Lines end with CR, LF or CRLF, also when a CRLF is split between two reads.
//! - `data:` lines (one space after the colon is dropped) add to the event's data; several are
//!   joined with `\n`. A blank line ends the event. A leading byte-order mark is skipped.
//! - Comments (`:` lines, the servers' keep-alives), `event:`, `id:`, `retry:` and unknown
//!   fields are ignored, as the official clients do (the RFD defines no event types or ids).
//! - An event without data is dropped; so is an unfinished event when the stream ends.
//! - One event (with the line being read) may hold at most `max_event_bytes`; beyond that
//!   [`SseParser::feed`] fails, and the stream is unusable.

/// An event that outgrew the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventTooLarge {
    /// The limit, in bytes.
    pub(crate) limit: usize,
}

impl std::fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an SSE event is larger than the {}-byte limit", self.limit)
    }
}

/// An incremental SSE parser: feed it the body's bytes as they come.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// The line being read (without its end).
    line: Vec<u8>,
    /// The data of the event being read, each line followed by `\n`.
    data: Vec<u8>,
    /// The last byte fed was a CR: a LF right after it belongs to the same line end.
    after_cr: bool,
    /// No line has ended yet (a byte-order mark may start the first one).
    first_line: bool,
    max_event_bytes: usize,
}

impl SseParser {
    /// A parser whose events may hold up to `max_event_bytes`.
    pub(crate) fn new(max_event_bytes: usize) -> Self {
        SseParser { line: Vec::new(), data: Vec::new(), after_cr: false, first_line: true, max_event_bytes }
    }

    /// Reads `bytes`, pushing the data of each event they complete onto `events`.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], events: &mut Vec<Vec<u8>>) -> Result<(), EventTooLarge> {
        if bytes.is_empty() {
            // Nothing read: a CR fed last still waits for its LF.
            return Ok(());
        }
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        while !bytes.is_empty() {
            let Some(end) = memchr::memchr2(b'\r', b'\n', bytes) else {
                self.grow_line(bytes)?;
                break;
            };
            self.grow_line(&bytes[..end])?;
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    // The LF of a CRLF may come with the next read.
                    None => self.after_cr = true,
                }
            }
            self.end_line(events)?;
        }
        Ok(())
    }

    fn grow_line(&mut self, part: &[u8]) -> Result<(), EventTooLarge> {
        if self.data.len() + self.line.len() + part.len() > self.max_event_bytes {
            return Err(EventTooLarge { limit: self.max_event_bytes });
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn end_line(&mut self, events: &mut Vec<Vec<u8>>) -> Result<(), EventTooLarge> {
        let mut line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.first_line) && line.starts_with("\u{feff}".as_bytes()) {
            line.drain(..3);
        }
        if line.is_empty() {
            if self.data.last() == Some(&b'\n') {
                self.data.pop();
            }
            let data = std::mem::take(&mut self.data);
            if !data.is_empty() {
                events.push(data);
            }
        } else if line[0] != b':' {
            let (field, value) = match memchr::memchr(b':', &line) {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (&line[..], &[][..]),
            };
            if field == b"data" {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    return Err(EventTooLarge { limit: self.max_event_bytes });
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
        }
        // Reuse the line's allocation.
        line.clear();
        self.line = line;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in(chunks: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::new(1024);
        let mut events = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut events).unwrap();
        }
        events.into_iter().map(|e| String::from_utf8(e).unwrap()).collect()
    }

    fn parse(text: &str) -> Vec<String> {
        parse_in(&[text.as_bytes()])
    }

    #[test]
    fn an_empty_read_between_a_cr_and_its_lf_ends_one_line() {
        assert_eq!(parse_in(&[b"data: a\r", b"", b"\ndata: b\r\n\r\n"]), ["a\nb"]);
    }

    #[test]
    fn data_lines_make_events() {
        assert_eq!(parse("data: {\"a\":1}\n\ndata:{\"b\":2}\n\n"), ["{\"a\":1}", "{\"b\":2}"]);
        // Only one space is dropped.
        assert_eq!(parse("data:  x\n\n"), [" x"]);
        // Several data lines are joined with LF.
        assert_eq!(parse("data: {\"a\":\ndata: 1}\n\n"), ["{\"a\":\n1}"]);
        // `data` without a colon is an empty data line.
        assert_eq!(parse("data\ndata: x\n\n"), ["\nx"]);
    }

    #[test]
    fn every_line_end_counts() {
        assert_eq!(parse("data: a\r\n\r\ndata: b\r\rdata: c\n\n"), ["a", "b", "c"]);
        // A CRLF split between two reads is one line end, not two (which would end the event).
        assert_eq!(parse_in(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]), ["a\nb"]);
        // A CR at the end of a read followed by another line.
        assert_eq!(parse_in(&[b"data: a\r", b"data: b\n\n"]), ["a\nb"]);
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let text = ":\n\n: keep-alive\nevent: message\nid: 7\nretry: 10\nfoo: bar\ndata: x\n\n";
        assert_eq!(parse(text), ["x"]);
        // A keep-alive alone is no event, nor is an event with an empty data line.
        assert_eq!(parse(":\n\n:\n\ndata:\n\n"), Vec::<String>::new());
    }

    #[test]
    fn events_split_anywhere_are_whole() {
        let text = "data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n:\n\ndata: y\n\n";
        for split in 0..text.len() {
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(parse_in(&[a, b]), ["{\"jsonrpc\":\"2.0\",\"method\":\"x\"}", "y"], "split at {split}");
        }
        // Byte by byte.
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(parse_in(&bytes).len(), 2);
    }

    #[test]
    fn a_leading_bom_is_skipped_and_an_unfinished_event_dropped() {
        assert_eq!(parse("\u{feff}data: x\n\ndata: unfinished\n"), ["x"]);
        // Only at the start of the stream.
        assert_eq!(parse("data: x\n\n\u{feff}data: y\n\n"), ["x"]);
    }

    #[test]
    fn events_are_bounded() {
        let mut parser = SseParser::new(24);
        let mut events = Vec::new();
        parser.feed(b"data: 0123456789abcde\n\n", &mut events).unwrap();
        assert_eq!(events.len(), 1);
        // Over several data lines.
        let mut parser = SseParser::new(24);
        assert_eq!(
            parser.feed(b"data: 0123456789\ndata: 0123456789\n\n", &mut events),
            Err(EventTooLarge { limit: 24 })
        );
        // A line that never ends.
        let mut parser = SseParser::new(16);
        parser.feed(b"data: 0123456", &mut events).unwrap();
        assert!(parser.feed(b"789abcdef", &mut events).is_err());
        // Comments count while they are read too, but not once they have ended.
        let mut parser = SseParser::new(16);
        for _ in 0..10 {
            parser.feed(b": keep-alive\n", &mut events).unwrap();
        }
    }
}
