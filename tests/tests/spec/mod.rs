//! What the spec-example tests of both protocol versions share: reading the ```json blocks of a
//! spec page and classifying them (a message by its method, a payload by what it holds), and
//! re-encoding a typed value once it is known to hold no fallback variant. `lossless.rs` reads
//! the examples of both versions through it too.

// Each test file uses a part of it.
#![allow(dead_code)]

use serde_json::Value;

/// A fenced ```json block of a page.
// The v2 pages show v1 examples too, told apart by the label and the heading.
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

/// Which protocol's types an example is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Protocol {
    V1,
    V2,
}

/// The pages of one protocol's spec (`../shared/acp-spec/v1` or `v2`), sorted.
pub fn pages(protocol: Protocol) -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(match protocol {
        Protocol::V1 => "../../shared/acp-spec/v1",
        Protocol::V2 => "../../shared/acp-spec/v2",
    });
    let mut pages: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the spec pages at {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "mdx"))
        .collect();
    pages.sort();
    pages
}

/// One ```json block of a spec page, classified.
pub struct Example {
    /// The page's file name (`prompt-turn.mdx`).
    pub page: String,
    /// The block's number on its page, from 1.
    pub number: usize,
    /// The protocol its types are: the pages' own, or v1 for a v1 comparison on a v2 page.
    pub protocol: Protocol,
    pub block: Block,
    pub content: Content,
}

impl Example {
    /// `page.mdx example 3`.
    pub fn place(&self) -> String {
        format!("{} example {}", self.page, self.number)
    }
}

/// What a block holds. The pages elide long arrays as `[...]`; those are read as empty arrays.
pub enum Content {
    /// Not JSON even with `[...]` read as `[]`.
    NotJson(String),
    /// Not a JSON-RPC message (no `jsonrpc`): a payload, or an excerpt of one.
    Payload(Value),
    /// A request (with an id) or a notification: its method and params (`null` when absent).
    Call { method: String, params: Value, request: bool },
    /// A response with a result (`null` when absent), and the method of its request: the
    /// latest request with the same id on the page, or else what the result holds (see
    /// [`infer_method`]) or, on the v2 pages, the request the prose before it names.
    Result { id: Value, method: Option<String>, result: Value },
    /// A response with an error object.
    Error(Value),
    /// A message with neither a method nor an id.
    Neither,
}

/// Every ```json block of `protocol`'s pages, classified, in page order; and the number of pages.
pub fn examples(protocol: Protocol) -> (usize, Vec<Example>) {
    let pages = pages(protocol);
    let mut out = Vec::new();
    for page in &pages {
        let name = page.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(page).expect("spec page is readable");
        // id → method of the latest request on this page.
        let mut pending: Vec<(Value, String)> = Vec::new();
        for (i, block) in json_blocks(&text).into_iter().enumerate() {
            let block_protocol = match protocol {
                Protocol::V1 => Protocol::V1,
                Protocol::V2 => protocol_of(&block),
            };
            let content = match serde_json::from_str::<Value>(&block.text.replace("[...]", "[]")) {
                Err(e) => Content::NotJson(e.to_string()),
                Ok(value) if value.get("jsonrpc").is_none() => Content::Payload(value),
                Ok(message) => match (message.get("method").and_then(Value::as_str), message.get("id")) {
                    (Some(method), id) => {
                        if let Some(id) = id {
                            pending.push((id.clone(), method.to_owned()));
                        }
                        let params = message.get("params").cloned().unwrap_or(Value::Null);
                        Content::Call { method: method.to_owned(), params, request: id.is_some() }
                    }
                    (None, Some(id)) => match message.get("error") {
                        Some(error) => Content::Error(error.clone()),
                        None => {
                            let result = message.get("result").cloned().unwrap_or(Value::Null);
                            let method = pending
                                .iter()
                                .rev()
                                .find(|(pid, _)| pid == id)
                                .map(|(_, m)| m.clone())
                                .or_else(|| infer_method(protocol, &result).map(str::to_owned))
                                .or_else(|| match protocol {
                                    Protocol::V1 => None,
                                    Protocol::V2 => named_request(block_protocol, &block.prose),
                                });
                            Content::Result { id: id.clone(), method, result }
                        }
                    },
                    (None, None) => Content::Neither,
                },
            };
            out.push(Example { page: name.clone(), number: i + 1, protocol: block_protocol, block, content });
        }
    }
    (pages.len(), out)
}

/// v1 when the block's label or heading says so (the v2 migration page's comparisons).
pub fn protocol_of(block: &Block) -> Protocol {
    let v1_label = block.label.split_whitespace().any(|w| w == "v1");
    let v1_heading = block.heading.strip_prefix("v1").is_some_and(|rest| rest.starts_with([':', ' ']));
    if v1_label || v1_heading { Protocol::V1 } else { Protocol::V2 }
}

/// The method of a response whose request the page does not show, by what the result holds
/// (`stopReason` only on the v2 pages, where `session/prompt` answers at once).
pub fn infer_method(pages: Protocol, result: &Value) -> Option<&'static str> {
    if result.get("protocolVersion").is_some() {
        Some("initialize")
    } else if result.get("sessionId").is_some() {
        Some("session/new")
    } else if pages == Protocol::V2 && result.get("stopReason").is_some() {
        Some("session/prompt")
    } else {
        None
    }
}

/// The request the prose before a response names last (`` `session/prompt` ``): a result that
/// holds nothing telling (`{}`) is the answer to the request the text is about. Names that
/// are no request of `protocol` (notifications, fields) are passed over.
pub fn named_request(protocol: Protocol, prose: &str) -> Option<String> {
    let spans: Vec<&str> = prose.split('`').skip(1).step_by(2).collect();
    spans.into_iter().rev().find(|name| is_request(protocol, name)).map(str::to_owned)
}

/// Whether a response enum knows `method` (decoding `{}` fails or succeeds, but does not say
/// "no such method").
pub fn is_request(protocol: Protocol, method: &str) -> bool {
    use acp_types::v2;
    let empty = Value::Object(Default::default());
    match protocol {
        Protocol::V2 => {
            !matches!(v2::AgentResponse::decode(method, &empty), Ok(None))
                || !matches!(v2::ClientResponse::decode(method, &empty), Ok(None))
        }
        Protocol::V1 => {
            !matches!(acp_types::AgentResponse::decode(method, &empty), Ok(None))
                || !matches!(acp_types::ClientResponse::decode(method, &empty), Ok(None))
        }
    }
}

/// The type of a payload block, by what it holds; `None` when no rule applies: a tagged value
/// by its tag (`sessionUpdate`, or `type` with the values of one union), a few objects by
/// members only their type has.
pub fn payload_type(value: &Value) -> Option<&'static str> {
    let obj = value.as_object()?;
    let has = |key: &str| obj.contains_key(key);
    let only = |keys: &[&str]| obj.keys().all(|k| keys.contains(&k.as_str()) || k == "_meta");
    let kind = obj.get("type").and_then(Value::as_str);
    Some(match kind {
        _ if has("sessionUpdate") => "SessionUpdate",
        // Auth method descriptors are the objects with a `methodId`.
        _ if has("methodId") => "AuthMethod",
        _ if has("configId") => "SessionConfigOption",
        Some("text" | "image" | "audio" | "resource" | "resource_link") => "ContentBlock",
        Some("content" | "diff" | "terminal") => "ToolCallContent",
        Some("stdio" | "http" | "sse") => "McpServer",
        Some("command" | "tool_call") => "RequestPermissionSubject",
        None if has("name") && has("description") && only(&["name", "description", "input"]) => "AvailableCommand",
        None if has("path") && only(&["path", "line"]) => "ToolCallLocation",
        _ => return None,
    })
}
