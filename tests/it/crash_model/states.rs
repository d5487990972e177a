//! The states a power loss may leave a recorded command's directory in,
//! after each of its steps, under the rules in `crash_model`'s header:
//! a prefix of the metadata operations no shorter than the last sync made
//! durable, and, of each write not yet synced (nor flushed by a rename
//! that replaced a file with it), all, none or the first half, in a
//! bounded set of combinations. States that come out the same are one.

use std::collections::{BTreeSet, HashMap};

use super::fs::{Keep, Kind, Meta, Recording, Tree};

/// Where a state came from: a crash after the first `k` steps, with the
/// first `m` of their `metas` metadata operations on disk (`floor` of them
/// durable), and the fates of the writes not yet synced.
#[derive(Debug, Clone)]
pub(super) struct Crash {
    pub k: usize,
    pub m: usize,
    pub metas: usize,
    pub floor: usize,
    pub fates: Vec<(usize, Keep)>,
}

impl Crash {
    /// `after step 12 (fdatasync history.jsonl): 5 of 6 metadata
    /// operations (4 durable); write 9 lost`.
    pub(super) fn describe(&self, rec: &Recording) -> String {
        let at = match self.k {
            0 => "before the first step".to_owned(),
            k => format!("after step {k} ({})", rec.steps[k - 1].what),
        };
        let mut text = format!(
            "{at}: {} of {} metadata operations on disk ({} durable)",
            self.m, self.metas, self.floor
        );
        let changed: Vec<String> = self
            .fates
            .iter()
            .filter(|(_, keep)| *keep != Keep::Whole)
            .map(|(i, keep)| format!("step {} {keep:?}", i + 1).to_lowercase())
            .collect();
        if !changed.is_empty() {
            text += &format!("; unsynced writes: {}", changed.join(", "));
        }
        text
    }
}

/// The distinct states, each with the last crash point that leaves it
/// (the one whose promises are the strictest), and how many crash states
/// were enumerated before duplicates were dropped.
pub(super) struct Enumerated {
    pub states: Vec<(Tree, Crash)>,
    pub tried: usize,
}

/// What is known of one write step.
struct WriteStep {
    step: usize,
    ino: usize,
    /// The first later sync of its file: from there it is durable.
    synced_at: Option<usize>,
    /// The first later rename that replaced a file with its file (the
    /// step, and its place among the metadata operations): where that
    /// rename is on disk, so is the write.
    flushed_by: Option<(usize, usize)>,
}

/// The most metadata prefixes tried at one crash point.
const PREFIXES: usize = 8;

pub(super) fn enumerate(rec: &Recording) -> Enumerated {
    let writes = write_steps(rec);
    let total = rec.metas_before(rec.steps.len());
    let named: Vec<BTreeSet<usize>> = (0..=total)
        .map(|m| rec.named_after(m).into_iter().collect())
        .collect();
    let mut states: Vec<(Tree, Crash)> = Vec::new();
    let mut index: HashMap<Tree, usize> = HashMap::new();
    let (mut metas, mut floor, mut tried) = (0, 0, 0);
    for k in 0..=rec.steps.len() {
        if k > 0 {
            match rec.steps[k - 1].kind {
                Kind::Meta(_) => metas += 1,
                Kind::Sync { floor: f, .. } => floor = floor.max(f),
                Kind::Write { .. } => {}
            }
        }
        for m in prefixes(floor, metas) {
            let open: Vec<usize> = writes
                .iter()
                .filter(|w| w.step < k && w.synced_at.is_none_or(|s| s >= k))
                .filter(|w| w.flushed_by.is_none_or(|(r, mi)| r >= k || mi >= m))
                .filter(|w| named[m].contains(&w.ino))
                .map(|w| w.step)
                .collect();
            for fate in fates(open.len()) {
                tried += 1;
                let keep = |i: usize| open.iter().position(|&o| o == i).map_or(Keep::Whole, |p| fate[p]);
                let tree = rec.replay(k, m, &keep);
                let crash = Crash {
                    k,
                    m,
                    metas,
                    floor,
                    fates: open.iter().copied().zip(fate.iter().copied()).collect(),
                };
                if let Some(&at) = index.get(&tree) {
                    states[at].1 = crash;
                } else {
                    index.insert(tree.clone(), states.len());
                    states.push((tree, crash));
                }
            }
        }
    }
    Enumerated { states, tried }
}

fn write_steps(rec: &Recording) -> Vec<WriteStep> {
    let mut out = Vec::new();
    for (i, step) in rec.steps.iter().enumerate() {
        let Kind::Write { ino, .. } = step.kind else {
            continue;
        };
        let mut w = WriteStep {
            step: i,
            ino,
            synced_at: None,
            flushed_by: None,
        };
        let mut meta = rec.metas_before(i + 1);
        for (j, later) in rec.steps.iter().enumerate().skip(i + 1) {
            match &later.kind {
                Kind::Sync { ino: s, .. } if *s == ino && w.synced_at.is_none() => w.synced_at = Some(j),
                Kind::Meta(op) => {
                    if let Meta::Rename {
                        ino: r,
                        replaced: true,
                        ..
                    } = op
                        && *r == ino
                        && w.flushed_by.is_none()
                    {
                        w.flushed_by = Some((j, meta));
                    }
                    meta += 1;
                }
                _ => {}
            }
        }
        out.push(w);
    }
    out
}

/// The metadata prefixes tried: every length from `floor` to `metas`, or
/// when there are more than [`PREFIXES`], both ends and some evenly
/// between.
fn prefixes(floor: usize, metas: usize) -> Vec<usize> {
    let n = metas - floor + 1;
    if n <= PREFIXES {
        return (floor..=metas).collect();
    }
    let mut out: BTreeSet<usize> = BTreeSet::new();
    for i in 0..PREFIXES {
        out.insert(floor + i * (n - 1) / (PREFIXES - 1));
    }
    out.into_iter().collect()
}

/// The fates tried for `n` unsynced writes, in program order: every
/// combination for up to three; beyond, the writes kept in order up to
/// one (and that one half), and each one alone lost or half with the rest
/// kept.
fn fates(n: usize) -> Vec<Vec<Keep>> {
    const ALL: [Keep; 3] = [Keep::Lost, Keep::Half, Keep::Whole];
    let mut out: BTreeSet<Vec<Keep>> = BTreeSet::new();
    if n <= 3 {
        let mut combos = vec![Vec::new()];
        for _ in 0..n {
            combos = combos
                .into_iter()
                .flat_map(|c: Vec<Keep>| ALL.map(|k| [c.clone(), vec![k]].concat()))
                .collect();
        }
        out.extend(combos);
    } else {
        for j in 0..=n {
            let mut prefix = vec![Keep::Lost; n];
            prefix[..j].fill(Keep::Whole);
            out.insert(prefix.clone());
            if j < n {
                prefix[j] = Keep::Half;
                out.insert(prefix);
            }
        }
        for i in 0..n {
            for k in [Keep::Lost, Keep::Half] {
                let mut one = vec![Keep::Whole; n];
                one[i] = k;
                out.insert(one);
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> String {
        text.bytes().map(|b| format!("\\x{b:02x}")).collect()
    }

    /// The values `s` takes in the states a temporary file `t` written,
    /// maybe synced, then renamed (or exchanged) over `s` may leave, and
    /// those it takes once the directory is synced.
    fn outcomes(sync: bool, rename: &str) -> (BTreeSet<String>, BTreeSet<String>) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let (t, s) = (format!("{d}/t"), format!("{d}/s"));
        let mut text = format!(
            "1 openat(AT_FDCWD<{}>, \"{}\", O_RDWR|O_CREAT|O_EXCL, 0600) = 3<{}>\n\
             1 write(3<{}>, \"{}\", 3) = 3\n",
            hex(d),
            hex(&t),
            hex(&t),
            hex(&t),
            hex("new")
        );
        if sync {
            text += &format!("1 fdatasync(3<{}>) = 0\n", hex(&t));
        }
        text += &match rename {
            "rename" => format!("1 rename(\"{}\", \"{}\") = 0\n", hex(&t), hex(&s)),
            _ => format!(
                "1 renameat2(AT_FDCWD<{0}>, \"{1}\", AT_FDCWD<{0}>, \"{2}\", RENAME_EXCHANGE) = 0\n",
                hex(d),
                hex(&t),
                hex(&s)
            ),
        };
        text += &format!("1 fsync(4<{}>) = 0\n", hex(d));
        let start: Tree = [("s".to_owned(), Some(b"old".to_vec()))].into();
        let rec = Recording::new(dir.path(), &start, &super::super::trace::parse(&text));
        let found = enumerate(&rec);
        let value = |tree: &Tree| String::from_utf8(tree["s"].clone().unwrap()).unwrap();
        let all = found.states.iter().map(|(tree, _)| value(tree)).collect();
        let last = found.states.iter().filter(|(_, c)| c.k == rec.steps.len());
        (all, last.map(|(tree, _)| value(tree)).collect())
    }

    #[test]
    fn a_file_synced_then_renamed_over_another_is_never_seen_torn() {
        let set = |v: &[&str]| {
            v.iter()
                .map(std::string::ToString::to_string)
                .collect::<BTreeSet<_>>()
        };
        assert_eq!(outcomes(true, "rename"), (set(&["old", "new"]), set(&["new"])));
        // auto_da_alloc: a rename that replaces a file flushes its data.
        assert_eq!(outcomes(false, "rename"), (set(&["old", "new"]), set(&["new"])));
        // An exchange does not: unsynced, the new name may show a torn file.
        let (all, last) = outcomes(false, "exchange");
        assert_eq!(all, set(&["old", "new", "", "n"]));
        assert_eq!(last, set(&["new", "", "n"]));
    }

    #[test]
    fn few_writes_get_every_fate_and_many_a_bounded_set() {
        assert_eq!(fates(0), vec![Vec::<Keep>::new()]);
        assert_eq!(fates(2).len(), 9);
        assert_eq!(fates(3).len(), 27);
        let many = fates(10);
        assert!(many.len() <= 4 * 10 + 2, "{}", many.len());
        assert!(many.contains(&vec![Keep::Whole; 10]));
        assert!(many.contains(&vec![Keep::Lost; 10]));
        assert_eq!(prefixes(2, 4), vec![2, 3, 4]);
        let p = prefixes(0, 30);
        assert_eq!((p.len(), p[0], p[PREFIXES - 1]), (PREFIXES, 0, 30));
    }
}
