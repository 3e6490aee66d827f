//! [`SessionStore`]: an agent's sessions, each kept under the [`Owner`] that created it, so
//! that listing, loading, resuming, prompting and closing see only the asker's own sessions,
//! and another owner's session id gets the same answer as an id nobody created. Ids are
//! [`random`](crate::owner::random_id) unless the agent picks its own.
//!
//! ```
//! use acp_rpc::owner::Owner;
//! use acp_rpc::sessions::SessionStore;
//!
//! let store: SessionStore<String> = SessionStore::new();
//! let (alice, bob) = (Owner::principal("alice"), Owner::principal("bob"));
//! let id = store.create(&alice, "/home/alice/project".to_owned());
//! assert_eq!(store.get(&alice, &id).as_deref(), Some("/home/alice/project"));
//! assert_eq!(store.get(&bob, &id), None); // as if it did not exist
//! assert!(store.list(&bob).is_empty());
//! assert_eq!(store.remove(&bob, &id), None); // bob cannot close it
//! assert!(store.remove(&alice, &id).is_some());
//! ```
//!
//! The handler reads the asker from its context: `cx.owner()` in `#[acp_agent]` handlers
//! (`AgentContext::owner`, and the same in v2), `req.peer.owner()` in a raw handler.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::owner::{Owner, random_id};

/// Sessions by id, each with the owner that created it; see the [module docs](self). Share
/// one store between the agents of all connections (in an `Arc`) and give each call the
/// asker's owner.
#[derive(Debug)]
pub struct SessionStore<T> {
    sessions: Mutex<HashMap<String, (Owner, T)>>,
}

impl<T> Default for SessionStore<T> {
    fn default() -> Self {
        SessionStore { sessions: Mutex::new(HashMap::new()) }
    }
}

/// [`SessionStore::insert`] refused: the id is taken (by whichever owner).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("session id {0:?} is already in use")]
pub struct IdTaken(pub String);

impl<T> SessionStore<T> {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Owner, T)>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores a new session of `owner` under a new random id (`sess_` and 128 random bits in
    /// hex), which it returns.
    pub fn create(&self, owner: &Owner, value: T) -> String {
        let mut sessions = self.lock();
        loop {
            let id = format!("sess_{}", random_id());
            if !sessions.contains_key(&id) {
                sessions.insert(id.clone(), (owner.clone(), value));
                return id;
            }
        }
    }

    /// Stores a session of `owner` under an id the agent chose. An id in use is refused,
    /// whoever owns it (a session is never handed to another owner).
    pub fn insert(&self, owner: &Owner, id: impl Into<String>, value: T) -> Result<(), IdTaken> {
        let id = id.into();
        let mut sessions = self.lock();
        if sessions.contains_key(&id) {
            return Err(IdTaken(id));
        }
        sessions.insert(id, (owner.clone(), value));
        Ok(())
    }

    /// Whether `owner` has the session `id`.
    pub fn contains(&self, owner: &Owner, id: &str) -> bool {
        self.lock().get(id).is_some_and(|(o, _)| o == owner)
    }

    /// Calls `f` with `owner`'s session `id`; `None` when `owner` has no such session (another
    /// owner's is the same as none).
    pub fn with<R>(&self, owner: &Owner, id: &str, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        match self.lock().get_mut(id) {
            Some((o, value)) if o == owner => Some(f(value)),
            _ => None,
        }
    }

    /// Removes `owner`'s session `id` and returns it; `None` (and nothing removed) when
    /// `owner` has no such session.
    pub fn remove(&self, owner: &Owner, id: &str) -> Option<T> {
        let mut sessions = self.lock();
        match sessions.get(id) {
            Some((o, _)) if o == owner => sessions.remove(id).map(|(_, value)| value),
            _ => None,
        }
    }

    /// `f` of each of `owner`'s sessions (its id and value), in the order of their ids.
    pub fn list_with<R>(&self, owner: &Owner, mut f: impl FnMut(&str, &T) -> R) -> Vec<R> {
        let sessions = self.lock();
        let mut mine: Vec<(&String, &T)> =
            sessions.iter().filter(|(_, (o, _))| o == owner).map(|(id, (_, value))| (id, value)).collect();
        mine.sort_by(|a, b| a.0.cmp(b.0));
        mine.into_iter().map(|(id, value)| f(id, value)).collect()
    }

    /// How many sessions `owner` has.
    pub fn count(&self, owner: &Owner) -> usize {
        self.lock().values().filter(|(o, _)| o == owner).count()
    }
}

impl<T: Clone> SessionStore<T> {
    /// A copy of `owner`'s session `id`; `None` when `owner` has no such session.
    pub fn get(&self, owner: &Owner, id: &str) -> Option<T> {
        self.with(owner, id, |value| value.clone())
    }

    /// `owner`'s sessions, sorted by id.
    pub fn list(&self, owner: &Owner) -> Vec<(String, T)> {
        self.list_with(owner, |id, value| (id.to_owned(), value.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_owners_session_is_as_good_as_missing() {
        let store = SessionStore::new();
        let (a, b) = (Owner::anonymous(), Owner::anonymous());
        let id = store.create(&a, 1);
        assert!(id.starts_with("sess_") && id.len() == 5 + 32, "{id}");
        assert_eq!(store.get(&a, &id), Some(1));
        assert_eq!((store.get(&b, &id), store.contains(&b, &id)), (None, false));
        assert_eq!(store.with(&b, &id, |v| *v += 1), None);
        assert_eq!(store.remove(&b, &id), None);
        assert_eq!(store.list(&b), vec![]);
        assert_eq!(store.count(&a), 1);
        assert_eq!(store.with(&a, &id, |v| *v += 1), Some(()));
        assert_eq!(store.list(&a), vec![(id.clone(), 2)]);
        // The agent's own id: refused when taken, whoever took it.
        assert_eq!(store.insert(&b, id.clone(), 9), Err(IdTaken(id.clone())));
        assert_eq!(store.insert(&b, "mine", 3), Ok(()));
        assert_eq!(store.get(&a, "mine"), None);
        assert_eq!(store.remove(&a, &id), Some(2));
        assert_eq!(store.count(&a), 0);
    }
}
