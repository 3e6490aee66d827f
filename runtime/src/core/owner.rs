//! Who is asking: the [`Owner`] of everything a connection creates, its sessions first, so
//! that one client cannot reach what another made. Every connection has one: by default a
//! fresh anonymous owner of its own (nothing is shared between connections), or the
//! principal the remote transport's authentication hook names
//! ([`HttpServer::identify`](crate::http::server::HttpServer::identify)), which every
//! connection of that principal shares, so a client can re-attach to its sessions on a new
//! connection.
//!
//! Also here: [`random_id`], 128 bits from the operating system's random numbers, for ids
//! nobody can guess.

use std::fmt;
use std::sync::Arc;

/// The owner of a connection's sessions: an authenticated principal, or an anonymous owner
/// that only one connection has. Compare owners with `==`; [`SessionStore`](crate::sessions::SessionStore)
/// keeps each owner's sessions apart.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(Arc<str>);

impl Owner {
    /// The principal `name`, as an authentication hook names it (a user, an API key's
    /// holder): every connection with this owner shares its sessions.
    pub fn principal(name: impl AsRef<str>) -> Owner {
        Owner(format!("principal:{}", name.as_ref()).into())
    }

    /// A new anonymous owner, equal to no other: what a connection gets when nothing
    /// authenticated it.
    pub fn anonymous() -> Owner {
        Owner(format!("anonymous:{}", random_id()).into())
    }

    /// The principal's name; `None` for an anonymous owner.
    pub fn principal_name(&self) -> Option<&str> {
        self.0.strip_prefix("principal:")
    }

    /// The owner as text (`principal:NAME` or `anonymous:ID`), for logs.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&&*self.0).finish()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// 128 random bits from the operating system, as 32 lowercase hex digits: an id nobody can
/// guess from the ones they have seen.
///
/// # Panics
///
/// When the operating system has no random numbers to give, which no supported system does
/// once booted; an id that could be guessed is worse than a panic.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random number generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_equal_by_principal_and_anonymous_ones_never() {
        assert_eq!(Owner::principal("alice"), Owner::principal("alice"));
        assert_ne!(Owner::principal("alice"), Owner::principal("bob"));
        assert_ne!(Owner::anonymous(), Owner::anonymous());
        assert_eq!(Owner::principal("alice").principal_name(), Some("alice"));
        assert_eq!(Owner::anonymous().principal_name(), None);
        // A principal named like an anonymous owner's text is still a principal.
        let anonymous = Owner::anonymous();
        assert_ne!(Owner::principal(anonymous.as_str()), anonymous);
    }

    #[test]
    fn random_ids_are_128_bits_of_hex_and_differ() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
