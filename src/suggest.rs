//! "Did you mean": the one way a mistyped name is matched against the
//! names that exist. It is clap's own measure and threshold (strsim's
//! Jaro-Winkler, similarity above 0.7), so a loop name, a status, a stock
//! gate and a backend are suggested as a mistyped flag is.

/// The similarity above which a name is suggested (clap's).
const THRESHOLD: f64 = 0.7;

/// The candidate most like `typed`, when one is like it enough; ties go
/// to the first. `typed` itself is never suggested.
pub fn closest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        if c == typed {
            continue;
        }
        let score = strsim::jaro_winkler(typed, c);
        if score > THRESHOLD && best.is_none_or(|(b, _)| score > b) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `; did you mean "agent"?`, or nothing: what an error about `typed`
/// ends with.
pub fn hint<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(typed, candidates)
        .map(|c| format!("; did you mean {c:?}?"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposition_is_suggested() {
        assert_eq!(closest("agnet", ["nightly", "agent", "age"]), Some("agent"));
        assert_eq!(closest("budgt", ["backoff", "budget"]), Some("budget"));
    }

    #[test]
    fn nothing_like_it_suggests_nothing() {
        assert_eq!(closest("zzz", ["agent", "nightly"]), None);
        assert_eq!(closest("agent", ["agent"]), None);
        assert_eq!(hint("zzz", ["agent"]), "");
        assert_eq!(hint("agnet", ["agent"]), "; did you mean \"agent\"?");
    }
}
