//! The conductor's debug log ([`Conductor::debug_log`](super::Conductor::debug_log)): every
//! line each component reads and writes, in the official conductor's `--debug` layout, so a
//! chain's raw traffic can be read in one file.
//!
//! | line | what it is |
//! |---|---|
//! | `N → +MSms LINE` | written to component `N`'s stdin (`N` from 0; the agent is the last) |
//! | `N ← +MSms LINE` | read from component `N`'s stdout |
//! | `N ! +MSms LINE` | written by component `N` to its stderr, terminal escapes removed |
//! | `C → +MSms LINE` / `C ← +MSms LINE` | read from the client / written to it |
//! | `C ! +MSms LINE` | the conductor's own log ([`DebugLog::conductor_line`]; `acp-conductor --log`) |
//!
//! `MS` counts milliseconds from the chain's start. JSON-RPC lines are written compact, with
//! the credentials of MCP server definitions redacted as in the [trace](super::trace). A line
//! that is not JSON is written as it came up to the first word that may begin a credential
//! (`env`, `headers`, `url` in any case, or a `\u` escape); the rest is withheld and counted.
//! Other lines are written as they came. A log that cannot be written is given up, never the
//! chain.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use serde_json::value::RawValue;

use super::Place;

/// Members whose values [`super::trace::redact`] may change: a line without them, written
/// plainly or with a `\u` escape (see [`may_hold_credentials`]), is logged as it is.
const MAY_HOLD_CREDENTIALS: [&str; 3] = ["\"env\"", "\"headers\"", "\"url\""];

/// Whether `msg` may name one of [`MAY_HOLD_CREDENTIALS`]. A key can be spelled with `\u`
/// escapes (`"\u0065nv"` is `"env"`), which a search for the plain name misses: any escape
/// sends the line through the decoded redaction.
fn may_hold_credentials(msg: &str) -> bool {
    msg.contains("\\u") || MAY_HOLD_CREDENTIALS.iter().any(|key| msg.contains(key))
}

/// Where a chain's debug log goes: shared by the hops' wire taps, the components' stderr
/// readers and whoever adds the conductor's own lines. Cloning shares the log.
///
/// Pass it to [`Conductor::debug_log_to`](super::Conductor::debug_log_to), and keep a clone to
/// add lines of your own with [`conductor_line`](Self::conductor_line) (`acp-conductor` sends
/// its `tracing` events there).
#[derive(Clone)]
pub struct DebugLog(Arc<Mutex<State>>);

impl std::fmt::Debug for DebugLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DebugLog")
    }
}

struct State {
    out: Box<dyn Write + Send>,
    started: Instant,
    failed: bool,
}

impl DebugLog {
    /// A log written to `out`, one flushed line at a time; the milliseconds count from now.
    /// Writing the header (the official conductor's `=== Conductor Debug Log ===` block) is
    /// left to the caller.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        DebugLog(Arc::new(Mutex::new(State { out: Box::new(out), started: Instant::now(), failed: false })))
    }

    /// Adds a line of the conductor's own (`C ! +MSms LINE`), terminal escapes and the
    /// whitespace around it removed.
    pub fn conductor_line(&self, line: &str) {
        self.write("C", '!', strip_escapes(line).trim());
    }

    /// One line of a hop's wire tap (`{"dir":..,"msg":..}` or `{"dir":..,"invalid":..}`).
    pub(super) fn wire(&self, place: Place, tapped: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Tapped<'a> {
            dir: &'a str,
            #[serde(borrow)]
            msg: Option<&'a RawValue>,
            invalid: Option<String>,
        }
        let Ok(entry) = serde_json::from_slice::<Tapped<'_>>(tapped) else { return };
        let inbound = entry.dir == "in";
        let text = match (entry.msg, entry.invalid) {
            // As it was on the wire, unless it may hold credentials.
            (Some(msg), _) if !may_hold_credentials(msg.get()) => msg.get().to_owned(),
            (Some(msg), _) => {
                let Ok(mut msg) = serde_json::from_str::<Value>(msg.get()) else { return };
                super::trace::redact(&mut msg);
                msg.to_string()
            }
            (None, Some(raw)) => withhold_credentials(raw),
            (None, None) => return,
        };
        // Toward a component is its stdin; toward the conductor, its stdout. The client's
        // side is the conductor's own stdin and stdout.
        let (label, arrow) = match place {
            Place::Component(index) => (index.to_string(), if inbound { '←' } else { '→' }),
            Place::Client => ("C".to_owned(), if inbound { '→' } else { '←' }),
        };
        self.write(&label, arrow, &text);
    }

    /// A line component `index` wrote to its stderr.
    #[cfg(feature = "process")]
    pub(super) fn stderr(&self, index: usize, line: &str) {
        self.write(&index.to_string(), '!', &strip_escapes(line));
    }

    fn write(&self, label: &str, arrow: char, text: &str) {
        let failed = {
            let mut state = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if state.failed {
                return;
            }
            let ms = state.started.elapsed().as_millis();
            let written = writeln!(state.out, "{label} {arrow} +{ms}ms {text}").and_then(|()| state.out.flush());
            state.failed = written.is_err();
            written.err()
        };
        // Outside the lock: this event may itself be routed into this log (`acp-conductor
        // --log`), where it now finds the log given up.
        if let Some(e) = failed {
            tracing::warn!(error = %e, "acp conductor: the debug log cannot be written; logging stops");
        }
    }
}

/// A line that is not JSON has no members to redact one by one: it is kept up to the first
/// word that may begin a credential, and the rest is replaced by a note of its length.
fn withhold_credentials(mut raw: String) -> String {
    // ASCII lowercasing keeps every byte's place, so an index into `lower` is one into `raw`.
    let lower = raw.to_ascii_lowercase();
    let start = ["env", "headers", "url", "\\u"].iter().filter_map(|word| lower.find(word)).min();
    if let Some(at) = start {
        let withheld = raw.len() - at;
        raw.truncate(at);
        raw.push_str(&format!("… [{withheld} bytes withheld: not JSON, and may hold credentials]"));
    }
    raw
}

/// `line` without terminal escape sequences: CSI (`ESC [` up to its final character, as in
/// colours) and two-character ones (`ESC` and one more).
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // Any other escape is two characters long: the one after `ESC` goes with it.
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_are_removed() {
        assert_eq!(strip_escapes("\u{1b}[1;31merror\u{1b}[0m: x\u{1b}7"), "error: x");
        assert_eq!(strip_escapes("plain → text"), "plain → text");
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Each key that may hold credentials, with any one of its characters written as a `\u`
    /// escape (lower- or uppercase hex), is redacted as the plain key is. JSON's other escapes
    /// stand for no letter, so a key that decodes to one of these names and is not written
    /// plainly holds a `\u`, which sends the line through the decoded redaction.
    #[test]
    fn keys_spelled_with_escapes_are_redacted() {
        let out = Shared::default();
        let log = DebugLog::new(out.clone());
        let members = [("env", r#"{"K":"s3cret"}"#), ("headers", r#"[{"name":"a","value":"s3cret"}]"#)];
        let members = members.into_iter().chain([("url", r#""https://u:s3cret@example.test/""#)]);
        let mut lines = 0;
        for (key, value) in members {
            for (at, c) in key.char_indices() {
                for escape in [format!("\\u{:04x}", u32::from(c)), format!("\\u{:04X}", u32::from(c))] {
                    let spelled = format!("{}{escape}{}", &key[..at], &key[at + 1..]);
                    let line = format!(
                        r#"{{"dir":"in","msg":{{"jsonrpc":"2.0","method":"x","params":{{"{spelled}":{value}}}}}}}"#
                    );
                    log.wire(Place::Client, line.as_bytes());
                    lines += 1;
                }
            }
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), lines, "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    /// A line that is not JSON keeps what comes before the first word that may begin a
    /// credential; nothing after it reaches the log.
    #[test]
    fn lines_that_are_not_json_withhold_what_may_be_credentials() {
        let out = Shared::default();
        let log = DebugLog::new(out.clone());
        let cut = r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"mcpServers":[{"name":"m","env":[{"name":"K","value":"s3cret""#;
        let quoted = serde_json::to_string(cut).unwrap();
        log.wire(Place::Client, format!(r#"{{"dir":"in","invalid":{quoted}}}"#).as_bytes());
        for raw in ["{\"URL\": \"https://u:s3cret@h/\"", "{\"h\\u0065aders\": s3cret", "Headers: s3cret"] {
            let quoted = serde_json::to_string(raw).unwrap();
            log.wire(Place::Component(0), format!(r#"{{"dir":"out","invalid":{quoted}}}"#).as_bytes());
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        let first = text.lines().next().unwrap();
        let kept = r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"mcpServers":[{"name":"m",""#;
        assert!(
            first.ends_with(&format!(
                "{kept}… [{} bytes withheld: not JSON, and may hold credentials]",
                cut.len() - kept.len()
            )),
            "{first}"
        );
        assert_eq!(text.lines().count(), 4, "{text}");
    }

    #[test]
    fn lines_carry_the_side_the_direction_and_redacted_messages() {
        let out = Shared::default();
        let log = DebugLog::new(out.clone());
        log.wire(Place::Client, br#"{"dir":"in","msg":{"jsonrpc":"2.0","method":"x","params":{"env":{"K":"v"}}}}"#);
        log.wire(Place::Component(1), br#"{"dir":"out","msg":{"jsonrpc":"2.0","id":1,"result":null}}"#);
        log.wire(Place::Component(1), br#"{"dir":"in","invalid":"not json"}"#);
        log.wire(Place::Client, br#"{"dir":"out","msg":{"jsonrpc":"2.0","id":1,"result":{}}}"#);
        // The same member with its key spelled with escapes is redacted all the same.
        log.wire(
            Place::Component(0),
            br#"{"dir":"out","msg":{"jsonrpc":"2.0","method":"x","params":{"\u0065nv":{"K":"secret"},"h\u0065aders":[{"name":"a","value":"secret"}]}}}"#,
        );
        log.conductor_line(" \u{1b}[2mINFO\u{1b}[0m acp_rpc: started\n");
        #[cfg(feature = "process")]
        log.stderr(0, "\u{1b}[33mwarn\u{1b}[0m hi");
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                // The elapsed milliseconds vary: `+Nms` becomes `+ms`.
                let (head, rest) = l.split_once(" +").unwrap();
                format!("{head} +{}", rest.split_once("ms ").map_or(rest, |(_, t)| t))
            })
            .collect();
        let mut expected = vec![
            r#"C → +{"jsonrpc":"2.0","method":"x","params":{"env":{"K":"[REDACTED]"}}}"#,
            r#"1 → +{"jsonrpc":"2.0","id":1,"result":null}"#,
            "1 ← +not json",
            r#"C ← +{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"0 → +{"jsonrpc":"2.0","method":"x","params":{"env":{"K":"[REDACTED]"},"headers":[{"name":"a","value":"[REDACTED]"}]}}"#,
            "C ! +INFO acp_rpc: started",
        ];
        if cfg!(feature = "process") {
            expected.push("0 ! +warn hi");
        }
        assert_eq!(lines, expected);
    }
}
