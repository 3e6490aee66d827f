//! What the spec-example tests of both protocol versions share: reading the ```json blocks of a
//! spec page, and re-encoding a typed value once it is known to hold no fallback variant.

use serde_json::Value;

/// A fenced ```json block of a page.
// The v1 pages' test reads only the text; the v2 pages show v1 examples too, told apart by
// the label and the heading.
#[allow(dead_code)]
pub struct Block {
    /// The fence's info string after `json` (`v1 request`), trimmed.
    pub label: String,
    /// The text of the last Markdown heading before the block (without the `#`s).
    pub heading: String,
    /// The prose between the previous fence (or the heading) and this block.
    pub prose: String,
    pub text: String,
}

/// The ```json blocks of a page, in order. Headings are tracked outside code fences only (a
/// `#` line inside a shell block is not one).
pub fn json_blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut prose = String::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
            if let Some(label) = info.strip_prefix("json") {
                let (label, text) = (label.trim().to_owned(), body.join("\n"));
                out.push(Block { label, heading: heading.clone(), prose: prose.clone(), text });
            }
            prose.clear();
        } else if trimmed.starts_with('#') {
            heading = trimmed.trim_start_matches('#').trim().to_owned();
            prose.clear();
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    out
}

/// The fallback variants a decoded message holds, from its `Debug` text: a union's unknown kind
/// (`Other(UnknownVariant({..}))`, or `Unknown(..)` where the schema has an `other` kind), a
/// string enum's unknown value (`Other("..")`) and an open untagged union's unknown shape
/// (`Other(Object {..})`). A variant the schema names `Other` holds a payload type or nothing,
/// so it is not mistaken for one.
pub fn fallbacks(debug: &str) -> Vec<String> {
    const HELD: [&str; 7] = ["UnknownVariant(", "\"", "Object {", "String(", "Number(", "Array [", "Bool("];
    let mut out = Vec::new();
    for name in ["Other(", "Unknown(", "Unrecognized(", "UnrecognizedValue("] {
        for (at, _) in debug.match_indices(name) {
            let starts_word = debug[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric() && c != '_');
            let rest = &debug[at + name.len()..];
            if starts_word && HELD.iter().any(|h| rest.starts_with(h)) {
                out.push(debug[at..].chars().take(80).collect());
            }
        }
    }
    out
}

/// Fails when the typed value holds a fallback variant (see [`fallbacks`]).
pub fn no_fallback<T: std::fmt::Debug>(typed: &T) -> Result<(), String> {
    match fallbacks(&format!("{typed:?}"))[..] {
        [] => Ok(()),
        ref found => Err(format!("decoded into a fallback variant: {}", found.join("; "))),
    }
}

/// The typed value's JSON, once it is known to hold no fallback variant.
pub fn reencode<T: serde::Serialize + std::fmt::Debug>(value: &T) -> Result<Value, String> {
    no_fallback(value)?;
    Ok(serde_json::to_value(value).expect("typed messages always serialise"))
}
