//! Who is acting, for the record: the user named in history and approvals,
//! and the host named in lock records. Each is kept to
//! [`crate::bounds::MAX_NAME`] bytes, however long the environment makes it.

use std::sync::OnceLock;

/// The acting user: `$AUTOMATON_USER` when set (a bot acting for a person, or
/// a shared service account), else the OS user. This names the actor in the
/// record and is what `[approval] approvers` checks; it is not an
/// authentication boundary — anyone who may write the loop's files may
/// change its state.
pub fn user() -> String {
    crate::bounds::name(unbounded_user())
}

fn unbounded_user() -> String {
    if let Some(u) = std::env::var("AUTOMATON_USER")
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        return u.trim().to_owned();
    }
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => std::env::var("USER").unwrap_or_else(|_| format!("uid{uid}")),
    }
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
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}
