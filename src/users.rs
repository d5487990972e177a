//! The console's users (`automaton user`, `automaton serve`): a name and
//! the SHA-256 of the token that signs it in. A token is shown once, when
//! it is made; only its hash is kept (in the root's `users.json`, private
//! to its owner, or in the PostgreSQL store's `users` table), so whoever
//! reads the record cannot sign in with it. Rotating a token or removing
//! the user ends every session the old token opened.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// What every token starts with, so a leaked one is recognised.
pub(crate) const TOKEN_PREFIX: &str = "atm_";

/// One user of the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The name roles are checked against (`approvers = ["ann"]`).
    pub name: String,
    /// The hex SHA-256 of the user's token.
    pub token_sha256: String,
    pub created_at: Timestamp,
    /// When the token was last replaced (`user rotate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_at: Option<Timestamp>,
}

/// A user as `user list` shows it: never the hash.
#[derive(Debug, Serialize)]
pub struct Listed<'a> {
    pub name: &'a str,
    pub created_at: Timestamp,
    pub rotated_at: Option<Timestamp>,
}

impl User {
    pub fn listed(&self) -> Listed<'_> {
        Listed {
            name: &self.name,
            created_at: self.created_at,
            rotated_at: self.rotated_at,
        }
    }
}

/// Checks a user name: 1 to 64 of `a-z A-Z 0-9 . _ @ -`, as OS user names
/// and e-mail addresses are written, starting with a letter or digit.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 64 {
        Some("it is longer than 64 bytes")
    } else if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        Some("it must start with a letter or a digit")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
    {
        Some("it may hold only letters, digits, '.', '_', '@' and '-'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidUser {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// A new random token: [`TOKEN_PREFIX`] and 64 hex digits (256 bits).
pub(crate) fn new_token() -> Result<String> {
    Ok(format!("{TOKEN_PREFIX}{}", hex(&random()?)))
}

/// 256 random bits from the OS.
pub(crate) fn random() -> Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::Io {
        action: "reading random bytes for",
        path: "a token".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(bytes)
}

/// The hex SHA-256 of `token`, as it is kept.
pub(crate) fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// The user `token` signs in, if any. Every user's hash is compared in
/// full, in time that does not depend on where a hash differs.
pub(crate) fn find<'a>(users: &'a [User], token: &str) -> Option<&'a User> {
    let wanted = hash(token);
    let mut found = None;
    for user in users {
        if same(user.token_sha256.as_bytes(), wanted.as_bytes()) {
            found = Some(user);
        }
    }
    found
}

/// Whether `a` and `b` are equal, compared in constant time (subtle's
/// comparison, which the optimiser is kept from cutting short); only
/// their lengths may tell.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_finds_its_user_by_hash_and_nothing_else_does() {
        let token = new_token().unwrap();
        assert!(token.starts_with(TOKEN_PREFIX) && token.len() == TOKEN_PREFIX.len() + 64);
        let users = vec![User {
            name: "ann".into(),
            token_sha256: hash(&token),
            created_at: Timestamp::UNIX_EPOCH,
            rotated_at: None,
        }];
        assert_eq!(find(&users, &token).map(|u| u.name.as_str()), Some("ann"));
        assert!(find(&users, &users[0].token_sha256).is_none());
        assert!(find(&users, "").is_none());
        assert_ne!(new_token().unwrap(), token);
    }

    #[test]
    fn user_names_are_checked() {
        assert!(check_name("ann.lee@example.com").is_ok());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
