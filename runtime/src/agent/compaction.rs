//! Context compaction as an agent reports it (`compaction_update` and
//! `compaction_summary_chunk` session updates): one [`Compaction`] per compaction, from
//! [`ClientHandle::start_compaction`](crate::agent::ClientHandle::start_compaction) to its end.
//!
//! The schema lets an agent send these updates only to a client that advertised
//! `clientCapabilities.session.compaction`; `start_compaction` checks that, so a handle exists
//! only where its updates may go. The first update fixes the compaction's place in the
//! session's timeline (`in_progress`); summary chunks append to its summary; the end is one of
//! `completed`, `failed` or `cancelled`.

use acp_types::{
    CompactionId, CompactionStatus, CompactionSummaryChunk, CompactionUpdate, ContentBlock, SessionId,
    SessionNotification, SessionUpdate,
};

use super::ClientHandle;
use crate::core::error::Error;

/// One context compaction of a session, started and reported (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Compaction {
    client: ClientHandle,
    session_id: SessionId,
    id: CompactionId,
}

impl Compaction {
    /// Reports a new compaction (`in_progress`) under a fresh id.
    pub(crate) async fn start(client: ClientHandle, session_id: SessionId) -> Result<Self, Error> {
        let id = CompactionId::from(format!("compaction_{}", crate::core::owner::random_id()));
        let compaction = Compaction { client, session_id, id };
        compaction.send(CompactionUpdate::new(compaction.id.clone(), CompactionStatus::InProgress).into()).await?;
        Ok(compaction)
    }

    /// The compaction's id, as the client sees it.
    pub fn id(&self) -> &CompactionId {
        &self.id
    }

    /// Appends `content` to the compaction's summary (`compaction_summary_chunk`).
    pub async fn summary_chunk(&self, content: impl Into<ContentBlock>) -> Result<(), Error> {
        self.send(CompactionSummaryChunk::new(self.id.clone(), content).into()).await
    }

    /// Reports the compaction finished (`completed`), with the whole summary when `summary`
    /// is given (it replaces what the chunks built; `None` keeps it).
    pub async fn complete(self, summary: Option<Vec<ContentBlock>>) -> Result<(), Error> {
        let mut update = CompactionUpdate::new(self.id.clone(), CompactionStatus::Completed);
        if let Some(summary) = summary {
            update = update.summary(summary);
        }
        self.send(update.into()).await
    }

    /// Reports the compaction failed (`failed`), with what went wrong.
    pub async fn fail(self, error: impl Into<String>) -> Result<(), Error> {
        let update = CompactionUpdate::new(self.id.clone(), CompactionStatus::Failed).error(error.into());
        self.send(update.into()).await
    }

    /// Reports the compaction cancelled before it finished (`cancelled`).
    pub async fn cancel(self) -> Result<(), Error> {
        self.send(CompactionUpdate::new(self.id.clone(), CompactionStatus::Cancelled).into()).await
    }

    async fn send(&self, update: SessionUpdate) -> Result<(), Error> {
        self.client.session_update(SessionNotification::new(self.session_id.clone(), update)).await
    }
}
