//! Who is acting, and how we know: the actor of every command (README,
//! "Who acts"), and the host named in lock records. Names are kept to
//! [`crate::bounds::MAX_NAME`] bytes, however long the environment makes
//! them.
//!
//! The actor is the real OS user of the process, its uid's name: nothing
//! in the environment changes who that is. `$AUTOMATON_USER` names a
//! person a bot acts for; it is recorded as "on behalf of", and counts as
//! that person only when the OS user is one of the root's delegates as an
//! admin recorded them (`automaton delegate add`, src/admin.rs): the
//! front-end resolves its actor once, from the store it opens
//! ([`crate::store::Stores::me`]), and passes it to what it calls; nothing
//! here keeps it. A server names its users by a token or a trusted proxy;
//! [`Via`] has room for both.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// How an actor was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// The process's real OS user.
    Os,
    /// A token a server checked.
    Token,
    /// A trusted proxy in front of a server named the user.
    Proxy,
    /// A delegate (an OS user listed in the root's `delegates`) acts for
    /// the person `$AUTOMATON_USER` names.
    Delegated,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Os => "os",
            Via::Token => "token",
            Via::Proxy => "proxy",
            Via::Delegated => "delegated",
        }
    }
}

/// Who acted: the name that counts (what `approvers` and `operators` are
/// checked against), how it was identified, and what else was said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The name that counts.
    pub user: String,
    pub via: Via,
    /// The OS user of the process, when it is not `user` (a delegate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_user: Option<String>,
    /// A person `$AUTOMATON_USER` named whom this actor does not count as
    /// (the OS user is not a delegate): kept for the record only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<String>,
    /// The database role of a PostgreSQL store's connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_role: Option<String>,
}

impl Actor {
    /// How the record says it: `ann`, `ann (delegated by ci)`,
    /// `root (on behalf of lead)`.
    pub fn describe(&self) -> String {
        let mut text = self.user.clone();
        if let Some(os) = &self.os_user {
            text += &format!(" ({} by {os})", self.via.as_str());
        } else if self.via != Via::Os {
            text += &format!(" (by {})", self.via.as_str());
        }
        if let Some(p) = &self.on_behalf_of {
            text += &format!(" (on behalf of {p})");
        }
        text
    }
}

/// The actor of this process's own commands: the OS user, or the person
/// `$AUTOMATON_USER` names when the OS user is one of `delegates` (those
/// the root's admin record honours), with the database role of the
/// store's connection. The front-end resolves it once, when it opens the
/// root's store ([`crate::store::Stores::me`]); a front-end that acts for
/// others (a server's signed-in user) passes them in instead
/// ([`crate::ops::Ctx`]).
pub fn own(delegates: &[String], db_role: Option<&str>) -> Actor {
    let mut actor = identify(&os_user(), requested().as_deref(), delegates);
    actor.db_role = db_role.map(str::to_owned);
    actor
}

/// A server's user, identified `via` a token or a trusted proxy.
pub fn served(user: &str, via: Via) -> Actor {
    Actor {
        user: crate::bounds::name(user.to_owned()),
        via,
        os_user: None,
        on_behalf_of: None,
        db_role: None,
    }
}

/// The pure rule: who `os` counts as, given the person a bot named.
pub fn identify(os: &str, named: Option<&str>, delegates: &[String]) -> Actor {
    let delegate = delegates.iter().any(|d| d == os);
    match named {
        Some(person) if person != os && delegate => Actor {
            user: person.to_owned(),
            via: Via::Delegated,
            os_user: Some(os.to_owned()),
            on_behalf_of: None,
            db_role: None,
        },
        Some(person) if person != os => Actor {
            user: os.to_owned(),
            via: Via::Os,
            os_user: None,
            on_behalf_of: Some(person.to_owned()),
            db_role: None,
        },
        _ => Actor {
            user: os.to_owned(),
            via: Via::Os,
            os_user: None,
            on_behalf_of: None,
            db_role: None,
        },
    }
}

/// Whether this process's actor would be another person if its OS user
/// were a delegate: `$AUTOMATON_USER` names someone else.
pub(crate) fn wants_delegation() -> bool {
    requested().is_some_and(|p| p != os_user())
}

/// The OS user of the process as the actor, whoever `$AUTOMATON_USER`
/// names (kept as "on behalf of"), with the store's database role: who
/// does what only a person may do in person, an admin's acts.
pub(crate) fn os_actor(db_role: Option<&str>) -> Actor {
    let mut actor = identify(&os_user(), requested().as_deref(), &[]);
    actor.db_role = db_role.map(str::to_owned);
    actor
}

/// The person `$AUTOMATON_USER` names, if any.
fn requested() -> Option<String> {
    std::env::var("AUTOMATON_USER")
        .ok()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .map(crate::bounds::name)
}

/// The real OS user of this process: its uid's name (`uid<N>` for a uid
/// with no name).
pub fn os_user() -> String {
    static USER: OnceLock<String> = OnceLock::new();
    USER.get_or_init(|| crate::bounds::name(crate::os::user_name()))
        .clone()
}

/// This machine's host name: `$AUTOMATON_HOST` when set (runners that
/// share a machine but should be told apart, as in a multi-host test, or a
/// container whose host name changes), else the OS host name.
pub fn host() -> String {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| crate::bounds::name(unbounded_host())).clone()
}

fn unbounded_host() -> String {
    if let Some(h) = std::env::var("AUTOMATON_HOST")
        .ok()
        .filter(|h| !h.trim().is_empty())
    {
        return h.trim().to_owned();
    }
    crate::os::host_name().unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_in_the_environment_is_a_record_unless_the_os_user_delegates() {
        let none: [String; 0] = [];
        let a = identify("root", Some("lead"), &none);
        assert_eq!((a.user.as_str(), a.via), ("root", Via::Os));
        assert_eq!(a.on_behalf_of.as_deref(), Some("lead"));
        let d = identify("root", Some("lead"), &["root".to_owned()]);
        assert_eq!((d.user.as_str(), d.via), ("lead", Via::Delegated));
        assert_eq!(d.os_user.as_deref(), Some("root"));
        let plain = identify("ann", None, &["ann".to_owned()]);
        assert_eq!((plain.user.as_str(), plain.via), ("ann", Via::Os));
        assert_eq!(identify("ann", Some("ann"), &none).on_behalf_of, None);
    }

    #[test]
    fn actors_round_trip_and_older_fields_default() {
        let a = identify("ci", Some("ann"), &["ci".to_owned()]);
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(text, r#"{"user":"ann","via":"delegated","os_user":"ci"}"#);
        assert_eq!(serde_json::from_str::<Actor>(&text).unwrap(), a);
        assert_eq!(a.describe(), "ann (delegated by ci)");
    }
}
