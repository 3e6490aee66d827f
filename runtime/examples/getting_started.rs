//! The agent of the book's first chapter ("Getting started"), as a reader types it into the
//! `src/main.rs` of a new project: it answers each prompt by repeating it word by word, and
//! stops as soon as the turn is cancelled. It passes `acp-check`.
//!
//! `cargo run -p acp-rpc --example getting_started` serves it on stdin/stdout.

// ANCHOR: all
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use acp_rpc::acp_types::*;
use acp_rpc::{AgentContext, acp_agent};

/// Requests run concurrently on one shared value: its state sits behind a lock.
#[derive(Default)]
struct Parrot {
    sessions: Mutex<HashSet<String>>,
}

#[acp_agent]
impl Parrot {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
        // Version negotiation: answer the version this agent speaks, whatever was asked for.
        Ok(InitializeResponse::new(ProtocolVersion::V1))
    }

    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }

    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        let mut sessions = self.sessions.lock().unwrap();
        let id = format!("sess_{}", sessions.len() + 1);
        sessions.insert(id.clone());
        Ok(NewSessionResponse::new(id))
    }

    // ANCHOR: prompt
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        if !self.sessions.lock().unwrap().contains(params.session_id.as_str()) {
            return Err(Error::resource_not_found());
        }
        let words: Vec<String> = params
            .prompt
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.clone()),
                _ => None,
            })
            .flat_map(|text| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .collect();
        for word in words {
            // A model takes its time: wait a little per word, unless the turn is cancelled.
            tokio::select! {
                _ = cx.cancelled() => return Ok(PromptResponse::new(StopReason::Cancelled)),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            let chunk = ContentChunk::new(TextContent::new(format!("{word} ")));
            let update = SessionNotification::new(params.session_id.clone(), SessionUpdate::AgentMessageChunk(chunk));
            cx.client().session_update(update).await?;
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    // ANCHOR_END: prompt

    async fn session_cancel(&self, _: CancelNotification) {
        // Nothing to do here: the runtime has already cancelled the turn's `cx`.
    }
}

#[tokio::main]
async fn main() -> Result<(), acp_rpc::Error> {
    // stdout carries the protocol; write logs to stderr.
    eprintln!("parrot: serving ACP on stdin/stdout");
    acp_rpc::agent::serve_stdio(Parrot::default()).await
}
// ANCHOR_END: all
