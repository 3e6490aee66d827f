//! Decoding JSON text into the protocol types, with the path of the value that failed.
//!
//! serde_json reports where decoding stopped as a line and a column, which says little in a
//! message of a few hundred bytes on one line. [`from_str`] and [`from_slice`] decode like
//! `serde_json::from_str` / `from_slice` and, on failure, turn that position into the JSON path
//! of the value being read (`prompt[1].type`, `env["API KEY"]`): [`DecodeError::path`].
//! [`from_str_with`] does the same for a decoder of one's own (a request decoded by its method
//! name), and [`DecodeError::locate`] for an error already in hand.

use serde::Deserialize;

/// Decodes `text` (one JSON value, surrounding whitespace allowed) into `T`; a failure
/// carries the path of the value that could not be decoded.
pub fn from_str<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, DecodeError> {
    from_str_with(text, |de| {
        let value = T::deserialize(&mut *de)?;
        de.end()?;
        Ok(value)
    })
}

/// [`from_str`] for bytes (UTF-8 JSON), as `serde_json::from_slice`.
pub fn from_slice<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    T::deserialize(&mut de).and_then(|value| de.end().map(|()| value)).map_err(|e| DecodeError::locate(bytes, e))
}

/// Runs `decode` on a deserializer over `text`, and locates its error as [`from_str`] does:
/// for decoders that are not a plain `Deserialize` (a message decoded by its method name,
/// `null` read as `{}`). Input after the value is not checked unless `decode` calls
/// `Deserializer::end`, so a decoder may also leave the value unread.
pub fn from_str_with<'a, T>(
    text: &'a str,
    decode: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::StrRead<'a>>) -> Result<T, serde_json::Error>,
) -> Result<T, DecodeError> {
    let mut de = serde_json::Deserializer::from_str(text);
    decode(&mut de).map_err(|e| DecodeError::locate(text, e))
}

/// A value that could not be decoded: serde_json's error, with the JSON path of the value it
/// was reading.
///
/// Displays as ``at prompt[1]: missing field `type` (line 1, column 66)``: at the top level
/// (`path()` is `Some("")`) without the `at ...:` part, and without a position when serde_json
/// gave none.
///
/// A path reaches as deep as serde_json was reading when it failed: a union (`ContentBlock`)
/// decodes its payload from the object as a whole, so a bad member of a block is located at
/// the block (`prompt[1]`), with serde_json's message saying what did not fit.
#[derive(Debug)]
pub struct DecodeError {
    path: Option<String>,
    message: String,
    error: serde_json::Error,
}

impl DecodeError {
    /// Locates `error`, which decoding `text` produced, in `text`. An error without a position
    /// (serde_json reports line 0, as when decoding from a `Value`) has no path.
    pub fn locate<T: AsRef<[u8]> + ?Sized>(text: &T, error: serde_json::Error) -> Self {
        let text = text.as_ref();
        let full = error.to_string();
        let message = match full.strip_suffix(&format!(" at line {} column {}", error.line(), error.column())) {
            Some(message) if error.line() > 0 => message.to_owned(),
            _ => full,
        };
        // A syntax error's column is just past the offending byte, which is not part of the
        // structure yet (`[1,,2]` fails at the second comma, where `[1]` was expected).
        let syntax = error.classify() == serde_json::error::Category::Syntax;
        let path = offset_of(text, error.line(), error.column())
            .map(|offset| path_at(text, if syntax { offset.saturating_sub(1) } else { offset }));
        DecodeError { path, message, error }
    }

    /// The JSON path of the value being decoded when it failed (`prompt[1].type`, `a["b c"]`,
    /// `[0]`): empty at the top level (the value itself, or input after it), `None` when the
    /// error has no position.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// serde_json's message without its position (`missing field `sessionId``).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The line of the failure, from 1 (0 when the error has no position).
    pub fn line(&self) -> usize {
        self.error.line()
    }

    /// The column of the failure on its line, in bytes from 1 (0 when the error has no position,
    /// or when it is at the line's start).
    pub fn column(&self) -> usize {
        self.error.column()
    }

    /// Whether the input was not JSON, ended early, or was JSON of the wrong shape.
    pub fn classify(&self) -> serde_json::error::Category {
        self.error.classify()
    }

    /// serde_json's error itself.
    pub fn into_inner(self) -> serde_json::Error {
        self.error
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path.as_deref() {
            Some(path) if !path.is_empty() => write!(f, "at {path}: {}", self.message)?,
            _ => f.write_str(&self.message)?,
        }
        if self.line() > 0 {
            write!(f, " (line {}, column {})", self.line(), self.column())?;
        }
        Ok(())
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The byte offset of serde_json's (line, column): the column counts bytes from the start of
/// its line. `None` for line 0 (no position).
fn offset_of(text: &[u8], line: usize, column: usize) -> Option<usize> {
    let start_of_line = match line {
        0 => return None,
        1 => 0,
        n => text.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(n - 2).map(|(at, _)| at + 1)?,
    };
    Some((start_of_line + column).min(text.len()))
}

/// The JSON path (`a.b[2]["odd key"]`) of the value being read at byte `offset` of `text`,
/// which is where serde_json reports a decoding error. Never fails: malformed text yields a
/// shorter path. Keys that are not plain identifiers are quoted as JSON strings in brackets.
pub fn path_at<T: AsRef<[u8]> + ?Sized>(text: &T, offset: usize) -> String {
    enum Level {
        Object { key: Option<String>, expecting_key: bool },
        Array { index: usize },
    }
    let bytes = text.as_ref();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Level> = Vec::new();
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                if let Some(Level::Object { key, expecting_key: true }) = stack.last_mut() {
                    let raw = bytes.get(start..(i + 1).min(bytes.len())).unwrap_or_default();
                    // Through `from_str`, as the decoders are: a `from_slice` here alone would
                    // compile serde_json's whole number parser a second time (for the error it
                    // would give a non-string).
                    *key = std::str::from_utf8(raw).ok().and_then(|raw| serde_json::from_str::<String>(raw).ok());
                }
            }
            b':' => {
                if let Some(Level::Object { expecting_key, .. }) = stack.last_mut() {
                    *expecting_key = false;
                }
            }
            b',' => match stack.last_mut() {
                Some(Level::Object { key, expecting_key }) => {
                    *key = None;
                    *expecting_key = true;
                }
                Some(Level::Array { index }) => *index += 1,
                None => {}
            },
            b'{' => stack.push(Level::Object { key: None, expecting_key: true }),
            b'[' => stack.push(Level::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for level in &stack {
        match level {
            Level::Object { key: Some(key), .. } => {
                let plain = !key.is_empty()
                    && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                    && !key.starts_with(|c: char| c.is_ascii_digit());
                if plain {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                } else {
                    path.push('[');
                    path.push_str(&serde_json::to_string(key).unwrap_or_default());
                    path.push(']');
                }
            }
            Level::Object { key: None, .. } => {}
            Level::Array { index } => {
                path.push('[');
                path.push_str(&index.to_string());
                path.push(']');
            }
        }
    }
    path
}
