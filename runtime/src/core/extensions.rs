//! Per-connection state of the layers above the core, in the style of `http::Extensions`: one
//! value per type, created on first use, and hooks run once when the connection ends. The
//! core keeps the slot and never looks inside it, so a layer's state (the client's
//! `initialize` params, protocol v2's turns) costs a connection nothing until that layer runs.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

type Value = Arc<dyn Any + Send + Sync>;
type CloseHook = Box<dyn FnOnce() + Send>;

/// A connection's typed slots (see [`Peer::extensions`](crate::Peer::extensions)).
///
/// ```
/// # async fn example(peer: acp_rpc::Peer) {
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// // A counter of this connection's own, whoever asks for it first creates it.
/// #[derive(Default)]
/// struct Prompts(AtomicU64);
///
/// let prompts = peer.extensions().get_or_insert_with(Prompts::default);
/// prompts.0.fetch_add(1, Ordering::Relaxed);
/// assert_eq!(peer.extensions().get::<Prompts>().unwrap().0.load(Ordering::Relaxed), 1);
/// # }
/// ```
#[derive(Default)]
pub struct Extensions {
    values: Mutex<HashMap<TypeId, Value>>,
    closing: Mutex<Closing>,
}

#[derive(Default)]
struct Closing {
    closed: bool,
    hooks: Vec<CloseHook>,
}

impl Extensions {
    /// The value of type `T`, if one was inserted.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = lock(&self.values).get(&TypeId::of::<T>()).cloned()?;
        value.downcast().ok()
    }

    /// The value of type `T`, made by `make` if there is none yet (`make` runs at most once
    /// per connection, under the slot's lock: keep it short and do not touch the extensions
    /// from it).
    pub fn get_or_insert_with<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut values = lock(&self.values);
        let value = values.entry(TypeId::of::<T>()).or_insert_with(|| Arc::new(make()) as Value).clone();
        drop(values);
        value.downcast().unwrap_or_else(|_| unreachable!("each slot holds the type it is keyed by"))
    }

    /// Sets the value of type `T`, returning the one it replaces.
    pub fn insert<T: Any + Send + Sync>(&self, value: T) -> Option<Arc<T>> {
        let old = lock(&self.values).insert(TypeId::of::<T>(), Arc::new(value))?;
        old.downcast().ok()
    }

    /// Runs `hook` once when the connection ends, after its queued notifications were handled
    /// (when nothing more can arrive); at once if it has ended already.
    pub fn on_close(&self, hook: impl FnOnce() + Send + 'static) {
        let mut closing = lock(&self.closing);
        if closing.closed {
            drop(closing);
            hook();
        } else {
            closing.hooks.push(Box::new(hook));
        }
    }

    /// The connection ended: runs the close hooks, in the order they were added.
    pub(crate) fn close(&self) {
        let hooks = {
            let mut closing = lock(&self.closing);
            closing.closed = true;
            std::mem::take(&mut closing.hooks)
        };
        for hook in hooks {
            hook();
        }
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions").field("values", &lock(&self.values).len()).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; the maps stay usable if something ever did.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn one_value_per_type_made_once() {
        let extensions = Extensions::default();
        let made = AtomicUsize::new(0);
        let a = extensions.get_or_insert_with(|| {
            made.fetch_add(1, Ordering::Relaxed);
            String::from("first")
        });
        let b = extensions.get_or_insert_with(|| String::from("second"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(made.load(Ordering::Relaxed), 1);
        assert!(extensions.get::<u32>().is_none());
        assert_eq!(extensions.insert(7u32), None);
        assert_eq!(extensions.insert(8u32).as_deref(), Some(&7));
        assert_eq!(extensions.get::<u32>().as_deref(), Some(&8));
    }

    #[test]
    fn close_hooks_run_once_and_late_ones_at_once() {
        let extensions = Extensions::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        extensions.on_close(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 0);
        extensions.close();
        extensions.close();
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        let counter = runs.clone();
        extensions.on_close(move || {
            counter.fetch_add(10, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 11);
    }
}
