//! Reading a recorded [`Wire`]: the messages, the requests and their answers, and each prompt
//! turn as the agent reported it, checked against the order of `v2/prompt-lifecycle.mdx`:
//! the prompt's answer, `user_message` (the id the answer named, the prompt's content),
//! `state_update: running`, progress, and last the idle `state_update` with the stop reason.

use serde_json::Value;

use super::relay::{Dir, Wire};

/// One message of the wire.
#[derive(Clone, Debug)]
pub struct Msg {
    pub dir: Dir,
    pub json: Value,
}

impl Msg {
    pub fn method(&self) -> Option<&str> {
        self.json["method"].as_str()
    }

    fn is_response_to(&self, id: &Value) -> bool {
        self.json.get("method").is_none() && self.json.get("id") == Some(id)
    }

    /// The `update` of a `session/update` of `session`.
    fn update_of(&self, session: &Value) -> Option<&Value> {
        (self.method() == Some("session/update") && &self.json["params"]["sessionId"] == session)
            .then(|| &self.json["params"]["update"])
    }
}

/// The messages of a wire. Every line must be one JSON-RPC 2.0 object: neither side may send
/// a batch to the other here (both SDKs reject batches), nor anything that is not JSON.
pub fn messages(wire: &Wire) -> Result<Vec<Msg>, String> {
    wire.lines
        .iter()
        .map(|(dir, line)| match serde_json::from_str::<Value>(line) {
            Ok(json) if json.is_object() && json["jsonrpc"] == "2.0" => Ok(Msg { dir: *dir, json }),
            _ => Err(format!("not a JSON-RPC 2.0 object: {line}")),
        })
        .collect()
}

/// The `nth` (from 0) request of `method` sent in direction `dir`: its index.
pub fn request(msgs: &[Msg], dir: Dir, method: &str, nth: usize) -> Result<usize, String> {
    msgs.iter()
        .enumerate()
        .filter(|(_, m)| m.dir == dir && m.method() == Some(method) && m.json.get("id").is_some())
        .nth(nth)
        .map(|(i, _)| i)
        .ok_or_else(|| format!("no request #{nth} of {method}"))
}

/// The index of the answer to the request at `at`.
pub fn answer(msgs: &[Msg], at: usize) -> Result<usize, String> {
    let id = &msgs[at].json["id"];
    let back = if msgs[at].dir == Dir::ToAgent { Dir::ToClient } else { Dir::ToAgent };
    (at + 1..msgs.len())
        .find(|&i| msgs[i].dir == back && msgs[i].is_response_to(id))
        .ok_or_else(|| format!("no answer to {}", msgs[at].json))
}

/// One prompt turn, as the agent reported it.
#[derive(Debug)]
pub struct Turn {
    /// The `session/prompt` request's index.
    pub prompt: usize,
    /// What the agent sent for it, from the answer to the idle update, one word each (see
    /// [`event`]); a run of message chunks is one `agent_message_chunk*`.
    pub events: Vec<String>,
    /// The indices of those messages.
    pub indices: Vec<usize>,
    /// The user message's id (the answer's `messageId`, as the `user_message` repeats it).
    pub user_message: String,
    /// The agent messages of the turn: id and the text of their chunks, in order.
    pub agent_messages: Vec<(String, String)>,
    /// The idle update's stop reason.
    pub stop_reason: String,
}

/// A message the agent sent during a turn, as a short word: `answer`, `user_message`,
/// `state running`, `tool_call_update pending`, `request session/request_permission`,
/// `$/cancel_request`, `idle end_turn`, ...
fn event(msg: &Msg, session: &Value) -> Option<String> {
    if let Some(update) = msg.update_of(session) {
        let kind = update["sessionUpdate"].as_str().unwrap_or("?");
        return Some(match kind {
            "state_update" if update["state"] == "idle" => {
                format!("idle {}", update["stopReason"].as_str().unwrap_or("(none)"))
            }
            "state_update" => format!("state {}", update["state"].as_str().unwrap_or("?")),
            "tool_call_update" => match update["status"].as_str() {
                Some(status) => format!("tool_call_update {status}"),
                None => "tool_call_update".to_owned(),
            },
            other => other.to_owned(),
        });
    }
    match msg.method() {
        Some("$/cancel_request") => Some("$/cancel_request".to_owned()),
        Some(method) if msg.json.get("id").is_some() && msg.json["params"]["sessionId"] == *session => {
            Some(format!("request {method}"))
        }
        _ => None,
    }
}

/// The turn of the `session/prompt` at `at`, checked for the spec's order (see the module
/// docs). A turn that does not end (no idle update with a stop reason) is an error too.
pub fn turn(msgs: &[Msg], at: usize) -> Result<Turn, String> {
    let prompt = &msgs[at];
    let session = &prompt.json["params"]["sessionId"];
    let answered = answer(msgs, at)?;
    let answer = &msgs[answered].json;
    let user_message = answer["result"]["messageId"]
        .as_str()
        .ok_or_else(|| format!("the prompt's answer names no user message: {answer}"))?
        .to_owned();
    // Nothing of the turn before its answer (the spec's order; both SDKs' agents do so too).
    if let Some(early) =
        (at + 1..answered).find(|&i| msgs[i].dir == Dir::ToClient && event(&msgs[i], session).is_some())
    {
        return Err(format!("{} came before the prompt's answer", msgs[early].json));
    }
    let mut turn = Turn {
        prompt: at,
        events: vec!["answer".to_owned()],
        indices: vec![answered],
        user_message,
        agent_messages: Vec::new(),
        stop_reason: String::new(),
    };
    for (i, msg) in msgs.iter().enumerate().skip(answered + 1) {
        if msg.dir != Dir::ToClient {
            continue;
        }
        let Some(word) = event(msg, session) else { continue };
        if word == "agent_message_chunk" {
            let update = msg.update_of(session).unwrap();
            let id = update["messageId"].as_str().unwrap_or_default().to_owned();
            let text = update["content"]["text"].as_str().unwrap_or_default();
            match turn.agent_messages.iter_mut().find(|(known, _)| *known == id) {
                Some((_, all)) => all.push_str(text),
                None => turn.agent_messages.push((id, text.to_owned())),
            }
            if turn.events.last().is_some_and(|w| w == "agent_message_chunk*") {
                continue;
            }
        }
        let word = if word == "agent_message_chunk" { "agent_message_chunk*".to_owned() } else { word };
        let idle = word.strip_prefix("idle ").map(str::to_owned);
        turn.events.push(word);
        turn.indices.push(i);
        if let Some(reason) = idle {
            turn.stop_reason = reason;
            break;
        }
    }
    if turn.stop_reason.is_empty() || turn.stop_reason == "(none)" {
        return Err(format!("the turn never ended with an idle update and a stop reason: {:?}", turn.events));
    }
    let ack = msgs[turn.indices[1]].update_of(session);
    let ack = ack
        .filter(|u| u["sessionUpdate"] == "user_message")
        .ok_or_else(|| format!("the answer is not followed by the user message: {:?}", turn.events))?;
    if ack["messageId"] != turn.user_message.as_str() {
        return Err(format!(
            "user_message {} is not the message the answer named ({})",
            ack["messageId"], turn.user_message
        ));
    }
    if ack["content"] != prompt.json["params"]["prompt"] {
        return Err(format!(
            "user_message content {} is not the prompt {}",
            ack["content"], prompt.json["params"]["prompt"]
        ));
    }
    if turn.events.get(2).map(String::as_str) != Some("state running") {
        return Err(format!("the user message is not followed by `running`: {:?}", turn.events));
    }
    Ok(turn)
}
