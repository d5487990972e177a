//! One loop directory's files as a recorded command changed them: the
//! trace's calls on paths inside the directory turned into steps on
//! inodes (metadata operations, data writes, syncs), each sync with the
//! metadata prefix it makes durable, and the replay of any prefix of the
//! steps with some metadata operations and some writes left out. The
//! replay of every step, whole, must give the directory the command
//! really left: that checks the reading of the trace.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::trace::{Arg, Call};

/// A directory's contents: relative path → a file's bytes, or `None` for
/// a directory. The loop directory itself is not listed.
pub(super) type Tree = BTreeMap<String, Option<Vec<u8>>>;

/// Reads `dir` into a tree (symbolic links are not followed, nor listed).
pub(super) fn read_tree(dir: &Path) -> Tree {
    let mut tree = Tree::new();
    for rel in crate::common::tree(dir) {
        let path = dir.join(&rel);
        let meta = path.symlink_metadata().unwrap();
        if meta.is_dir() {
            tree.insert(rel, None);
        } else if meta.is_file() {
            tree.insert(rel, Some(std::fs::read(&path).unwrap()));
        }
    }
    tree
}

/// Writes `tree` into `dir`, which must not exist.
pub(super) fn write_tree(dir: &Path, tree: &Tree) {
    std::fs::create_dir_all(dir).unwrap();
    for (rel, content) in tree {
        let path = dir.join(rel);
        match content {
            None => std::fs::create_dir_all(&path).unwrap(),
            Some(bytes) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, bytes).unwrap();
            }
        }
    }
}

/// A metadata operation, journaled in program order.
#[derive(Debug, Clone)]
pub(super) enum Meta {
    /// A name for an inode: a file or directory made (or a hard link).
    Name { name: String, ino: usize },
    /// A name removed (unlink, rmdir).
    Unname { name: String },
    /// `rename`, `RENAME_NOREPLACE`: `to` is replaced when it was there.
    Rename {
        from: String,
        to: String,
        ino: usize,
        replaced: bool,
    },
    /// `renameat2(RENAME_EXCHANGE)`.
    Exchange { a: String, b: String },
    /// A file's size set (`ftruncate`, `O_TRUNC`, `fallocate`).
    SetLen { ino: usize, len: u64 },
}

#[derive(Debug, Clone)]
pub(super) enum Kind {
    Meta(Meta),
    /// Data written at `off`.
    Write {
        ino: usize,
        off: u64,
        data: Vec<u8>,
    },
    /// `fsync`/`fdatasync` of `ino`: once it returns, the data of every
    /// earlier write to it, and the first `floor` metadata operations, are
    /// durable.
    Sync {
        ino: usize,
        floor: usize,
    },
}

/// One step of the recorded command, with what it was for reports.
#[derive(Debug, Clone)]
pub(super) struct Step {
    pub what: String,
    pub kind: Kind,
}

/// The program's view of the files: names to inodes, inodes' bytes.
#[derive(Debug, Clone, Default)]
struct Fs {
    names: BTreeMap<String, usize>,
    /// Each inode's bytes, `None` for a directory.
    nodes: Vec<Option<Vec<u8>>>,
}

impl Fs {
    fn from_tree(tree: &Tree) -> Fs {
        let mut fs = Fs::default();
        fs.names.insert(String::new(), 0);
        fs.nodes.push(None);
        for (rel, content) in tree {
            fs.names.insert(rel.clone(), fs.nodes.len());
            fs.nodes.push(content.clone());
        }
        fs
    }

    fn tree(&self) -> Tree {
        self.names
            .iter()
            .filter(|(n, _)| !n.is_empty())
            .map(|(n, &ino)| (n.clone(), self.nodes[ino].clone()))
            .collect()
    }

    fn len(&self, ino: usize) -> u64 {
        self.nodes[ino].as_ref().map_or(0, |d| d.len() as u64)
    }

    fn apply(&mut self, meta: &Meta) {
        match meta {
            Meta::Name { name, ino } => {
                self.names.insert(name.clone(), *ino);
            }
            Meta::Unname { name } => {
                self.names.remove(name);
            }
            Meta::Rename { from, to, .. } => self.rename(from, to),
            Meta::Exchange { a, b } => {
                let (ia, ib) = (self.names[a], self.names[b]);
                self.names.insert(a.clone(), ib);
                self.names.insert(b.clone(), ia);
            }
            Meta::SetLen { ino, len } => {
                if let Some(d) = &mut self.nodes[*ino] {
                    d.resize(*len as usize, 0);
                }
            }
        }
    }

    /// Moves `from` (and, for a directory, every name under it) to `to`.
    fn rename(&mut self, from: &str, to: &str) {
        let under = format!("{from}/");
        let moved: Vec<(String, usize)> = self
            .names
            .iter()
            .filter(|(n, _)| *n == from || n.starts_with(&under))
            .map(|(n, &i)| (n.clone(), i))
            .collect();
        let gone = format!("{to}/");
        self.names.retain(|n, _| n != to && !n.starts_with(&gone));
        for (n, ino) in moved {
            self.names.remove(&n);
            self.names.insert(format!("{to}{}", &n[from.len()..]), ino);
        }
    }

    fn write(&mut self, ino: usize, off: u64, data: &[u8]) {
        let Some(d) = &mut self.nodes[ino] else { return };
        let (off, end) = (off as usize, off as usize + data.len());
        if d.len() < end {
            d.resize(end, 0);
        }
        d[off..end].copy_from_slice(data);
    }
}

/// The name's parent directory: `a/b` → `a`, `a` → the loop directory.
fn parent(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(p, _)| p)
}

/// The recorded command as steps on the directory it started from.
pub(super) struct Recording {
    start: Fs,
    pub steps: Vec<Step>,
    /// Writes to files that had lost their last name, passed over.
    pub orphan_writes: usize,
}

/// How much of an unsynced write a crash leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Keep {
    Lost,
    Half,
    Whole,
}

impl Recording {
    /// Turns `calls` into steps on `start`, the directory at `dir` (as the
    /// command was given it) before the command ran.
    pub(super) fn new(dir: &Path, start: &Tree, calls: &[Call]) -> Recording {
        Recording::of(&[(dir, "")], start, calls)
    }

    /// As [`Recording::new`], of several directories on one file system
    /// (one journal) seen as one tree: the first's names as they are, each
    /// other's under the name it is given (its top entry in the tree).
    pub(super) fn of(dirs: &[(&Path, &str)], start: &Tree, calls: &[Call]) -> Recording {
        let mut conv = Convert::new(dirs, start);
        for call in calls {
            if call.ret.is_some() {
                conv.call(call);
            }
        }
        // Every inode the command made is there from the start, empty: a
        // replay that leaves out the step that named one never shows it.
        let mut begin = Fs::from_tree(start);
        let made = conv.fs.nodes[begin.nodes.len()..].iter();
        begin.nodes.extend(made.map(|n| n.as_ref().map(|_| Vec::new())));
        Recording {
            start: begin,
            steps: conv.steps,
            orphan_writes: conv.orphan_writes,
        }
    }

    /// The tree a crash after the first `k` steps leaves when only the
    /// first `m` metadata operations reached the disk and write step `i`
    /// left `keep(i)` of its bytes.
    pub(super) fn replay(&self, k: usize, m: usize, keep: &dyn Fn(usize) -> Keep) -> Tree {
        let mut fs = self.start.clone();
        let mut meta = 0;
        for (i, step) in self.steps[..k].iter().enumerate() {
            match &step.kind {
                Kind::Meta(op) => {
                    if meta < m {
                        fs.apply(op);
                    }
                    meta += 1;
                }
                Kind::Write { ino, off, data } => match keep(i) {
                    Keep::Lost => {}
                    Keep::Half => fs.write(*ino, *off, &data[..half(*off, data.len())]),
                    Keep::Whole => fs.write(*ino, *off, data),
                },
                Kind::Sync { .. } => {}
            }
        }
        fs.tree()
    }

    /// Every step, whole: what the command left.
    pub(super) fn replay_all(&self, k: usize) -> Tree {
        let m = self.metas_before(k);
        self.replay(k, m, &|_| Keep::Whole)
    }

    /// How many of the first `k` steps are metadata operations.
    pub(super) fn metas_before(&self, k: usize) -> usize {
        self.steps[..k]
            .iter()
            .filter(|s| matches!(s.kind, Kind::Meta(_)))
            .count()
    }

    /// The inodes named after the first `m` metadata operations.
    pub(super) fn named_after(&self, m: usize) -> Vec<usize> {
        let mut fs = self.start.clone();
        let metas = self.steps.iter().filter_map(|s| match &s.kind {
            Kind::Meta(op) => Some(op),
            _ => None,
        });
        for op in metas.take(m) {
            fs.apply(op);
        }
        let mut inos: Vec<usize> = fs.names.values().copied().collect();
        inos.sort_unstable();
        inos
    }
}

/// Where a half-kept write is cut: at a 4 KiB boundary inside it, the
/// one nearest its middle, else at half its bytes (a torn sector).
pub(super) fn half(off: u64, len: usize) -> usize {
    const BLOCK: u64 = 4096;
    let (start, end) = (off, off + len as u64);
    let mid = off + len as u64 / 2;
    let down = mid / BLOCK * BLOCK;
    let up = down + BLOCK;
    let best = [down, up]
        .into_iter()
        .filter(|&b| b > start && b < end)
        .min_by_key(|&b| b.abs_diff(mid));
    best.map_or(len / 2, |b| (b - off) as usize)
}

/// Where a path the trace names is.
enum Place {
    /// Inside the loop directory: its relative name (`""` for the
    /// directory itself).
    Inside(String),
    /// A file inside it that no longer has a name (`-y` shows
    /// `path (deleted)`).
    Deleted,
    Outside,
}

/// The descriptor open for writing on an inode, and where it writes next.
struct Writer {
    fd: String,
    pos: u64,
    append: bool,
}

/// Turns the trace's calls into steps, keeping the program's view of the
/// files to tie names to inodes and writes to offsets. A write through a
/// descriptor goes to the inode the path `-y` shows names, at the position
/// of the last descriptor opened for writing on it (a `dup` shares it).
struct Convert {
    /// Each directory traced as the command was given it, and as `-y`
    /// shows, with the name its files have in the tree.
    dirs: Vec<(Vec<u8>, String)>,
    cwd: Option<Vec<u8>>,
    fs: Fs,
    steps: Vec<Step>,
    metas: usize,
    writers: HashMap<usize, Writer>,
    /// Inode → the metadata operations up to the last one that touched it
    /// (its name, its parent's entries, its size).
    touched: HashMap<usize, usize>,
    /// Inode → those up to the last one that made it or set its size.
    resized: HashMap<usize, usize>,
    /// Inode → its size when last synced.
    synced_len: HashMap<usize, u64>,
    orphan_writes: usize,
}

impl Convert {
    fn new(dirs: &[(&Path, &str)], start: &Tree) -> Convert {
        let mut known = Vec::new();
        for &(dir, name) in dirs {
            let given = dir.as_os_str().as_encoded_bytes().to_vec();
            known.push((given, name.to_owned()));
            if let Ok(real) = dir.canonicalize() {
                known.push((real.as_os_str().as_encoded_bytes().to_vec(), name.to_owned()));
            }
        }
        let fs = Fs::from_tree(start);
        let synced_len = (0..fs.nodes.len()).map(|i| (i, fs.len(i))).collect();
        Convert {
            dirs: known,
            cwd: None,
            fs,
            steps: Vec::new(),
            metas: 0,
            writers: HashMap::new(),
            touched: HashMap::new(),
            resized: HashMap::new(),
            synced_len,
            orphan_writes: 0,
        }
    }

    fn place(&self, path: &[u8]) -> Place {
        let (path, deleted) = match path.strip_suffix(b" (deleted)") {
            Some(p) => (p, true),
            None => (path, false),
        };
        for (d, top) in &self.dirs {
            let rel = if path == d.as_slice() {
                Some(&b""[..])
            } else {
                path.strip_prefix(d.as_slice()).and_then(|r| r.strip_prefix(b"/"))
            };
            if let Some(rel) = rel {
                if deleted {
                    return Place::Deleted;
                }
                let rel = String::from_utf8(rel.to_vec()).expect("a UTF-8 name");
                return Place::Inside(match (top.is_empty(), rel.is_empty()) {
                    (true, _) => rel,
                    (false, true) => top.clone(),
                    (false, false) => format!("{top}/{rel}"),
                });
            }
        }
        Place::Outside
    }

    /// The name inside the loop directory a call's descriptor is open on.
    fn fd_name(&mut self, fd: &Arg) -> Option<String> {
        match self.place(fd.path()?) {
            Place::Inside(name) => Some(name),
            Place::Deleted => {
                self.orphan_writes += 1;
                None
            }
            Place::Outside => None,
        }
    }

    fn ino(&self, name: &str) -> usize {
        *self
            .fs
            .names
            .get(name)
            .unwrap_or_else(|| panic!("the trace uses {name:?}, which the model does not have"))
    }

    /// A path argument, relative to `dirfd` (or the working directory).
    fn joined(&self, dirfd: Option<&Arg>, path: &Arg) -> Vec<u8> {
        let p = path.bytes().expect("a path string");
        if p.starts_with(b"/") {
            return p.to_vec();
        }
        let base = match dirfd {
            Some(d) => d.path().expect("a directory descriptor with its path").to_vec(),
            None => self
                .cwd
                .clone()
                .expect("a relative path before any AT_FDCWD showed the cwd"),
        };
        [&base[..], b"/", p].concat()
    }

    fn call(&mut self, c: &Call) {
        for a in &c.args {
            if let Arg::Fd { fd, path } = a
                && fd == "AT_FDCWD"
            {
                self.cwd = Some(path.clone());
            }
        }
        let a = &c.args;
        match c.name.as_str() {
            "openat" => self.open(c, a.get(2).map_or("", Arg::atom)),
            "open" => self.open(c, a.get(1).map_or("", Arg::atom)),
            "creat" => self.open(c, "O_WRONLY|O_CREAT|O_TRUNC"),
            "write" => self.write(c, a[1].bytes().unwrap().to_vec(), None),
            "pwrite64" => self.write(c, a[1].bytes().unwrap().to_vec(), a[3].number()),
            "writev" => self.write(c, iovecs(&a[1]), None),
            "pwritev" | "pwritev2" => self.write(c, iovecs(&a[1]), a[3].number()),
            "lseek" => self.seek(c),
            "ftruncate" | "fallocate" => self.resize(c),
            "truncate" => {
                let path = self.joined(None, &a[0]);
                if let Place::Inside(name) = self.place(&path) {
                    let ino = self.ino(&name);
                    self.set_len(c, &name, ino, a[1].number().unwrap());
                }
            }
            "fsync" | "fdatasync" => self.sync(c),
            "rename" => self.rename(c, (None, &a[0]), (None, &a[1]), ""),
            "renameat" => self.rename(c, (Some(&a[0]), &a[1]), (Some(&a[2]), &a[3]), ""),
            "renameat2" => self.rename(c, (Some(&a[0]), &a[1]), (Some(&a[2]), &a[3]), a[4].atom()),
            "link" => self.link(c, (None, &a[0]), (None, &a[1])),
            "linkat" => self.link(c, (Some(&a[0]), &a[1]), (Some(&a[2]), &a[3])),
            "unlink" | "rmdir" => self.unlink(c, None, &a[0]),
            "unlinkat" => self.unlink(c, Some(&a[0]), &a[1]),
            "mkdir" => self.mkdir(c, None, &a[0]),
            "mkdirat" => self.mkdir(c, Some(&a[0]), &a[1]),
            _ => {}
        }
    }

    fn meta(&mut self, what: String, op: Meta) {
        let named = |n: &str| self.fs.names.get(n).copied();
        let touched: Vec<usize> = match &op {
            Meta::Name { name, ino } => vec![Some(*ino), named(parent(name))],
            Meta::Unname { name } => vec![named(name), named(parent(name))],
            Meta::Rename { from, to, ino, .. } => {
                vec![Some(*ino), named(to), named(parent(from)), named(parent(to))]
            }
            Meta::Exchange { a, b } => vec![named(a), named(b), named(parent(a)), named(parent(b))],
            Meta::SetLen { ino, .. } => vec![Some(*ino)],
        }
        .into_iter()
        .flatten()
        .collect();
        let sized = match &op {
            Meta::Name { ino, .. } | Meta::SetLen { ino, .. } => Some(*ino),
            _ => None,
        };
        self.fs.apply(&op);
        self.metas += 1;
        for ino in touched {
            self.touched.insert(ino, self.metas);
        }
        if let Some(ino) = sized {
            self.resized.insert(ino, self.metas);
        }
        self.steps.push(Step {
            what,
            kind: Kind::Meta(op),
        });
    }

    fn open(&mut self, c: &Call, flags: &str) {
        let ret = c.ret.as_ref().unwrap();
        let Some(Place::Inside(name)) = ret.path.as_deref().map(|p| self.place(p)) else {
            return;
        };
        let has = |f: &str| flags.split('|').any(|x| x == f);
        assert!(!has("O_TMPFILE"), "{}: O_TMPFILE is not modelled", c.name);
        let writable = has("O_WRONLY") || has("O_RDWR");
        let ino = if let Some(&ino) = self.fs.names.get(&name) {
            if has("O_TRUNC") && writable && self.fs.len(ino) > 0 {
                self.meta(
                    format!("{}(O_TRUNC) {name}", c.name),
                    Meta::SetLen { ino, len: 0 },
                );
            }
            ino
        } else {
            let ino = self.fs.nodes.len();
            self.fs.nodes.push(Some(Vec::new()));
            self.meta(format!("{}(O_CREAT) {name}", c.name), Meta::Name { name, ino });
            ino
        };
        if writable {
            let fd = ret.value.to_string();
            let append = has("O_APPEND");
            self.writers.insert(ino, Writer { fd, pos: 0, append });
        }
    }

    fn write(&mut self, c: &Call, mut data: Vec<u8>, at: Option<u64>) {
        let Some(name) = self.fd_name(&c.args[0]) else {
            return;
        };
        let ino = self.ino(&name);
        data.truncate(c.ret.as_ref().unwrap().value as usize);
        let len = self.fs.len(ino);
        let off = if let Some(off) = at {
            off
        } else {
            let w = self.writers.get_mut(&ino).unwrap_or_else(|| {
                panic!(
                    "{}: a write to {name} through a descriptor not opened for writing",
                    c.name
                )
            });
            let off = if w.append { len } else { w.pos };
            w.pos = off + data.len() as u64;
            off
        };
        if data.is_empty() {
            return;
        }
        self.fs.write(ino, off, &data);
        self.steps.push(Step {
            what: format!("{} {name} ({} bytes at {off})", c.name, data.len()),
            kind: Kind::Write { ino, off, data },
        });
    }

    fn seek(&mut self, c: &Call) {
        let Some(name) = self.fd_name(&c.args[0]) else {
            return;
        };
        let ino = self.ino(&name);
        let fd = c.args[0].atom();
        if let Some(w) = self.writers.get_mut(&ino)
            && w.fd == fd
        {
            w.pos = c.ret.as_ref().unwrap().value as u64;
        }
    }

    fn resize(&mut self, c: &Call) {
        let Some(name) = self.fd_name(&c.args[0]) else {
            return;
        };
        let ino = self.ino(&name);
        let len = if c.name == "ftruncate" {
            c.args[1].number().unwrap()
        } else {
            let mode = c.args[1].atom();
            if mode.contains("FALLOC_FL_KEEP_SIZE") {
                return;
            }
            assert_eq!(mode, "0", "fallocate mode {mode} is not modelled");
            let end = c.args[2].number().unwrap() + c.args[3].number().unwrap();
            end.max(self.fs.len(ino))
        };
        self.set_len(c, &name, ino, len);
    }

    fn set_len(&mut self, c: &Call, name: &str, ino: usize, len: u64) {
        if len != self.fs.len(ino) {
            self.meta(
                format!("{} {name} to {len} bytes", c.name),
                Meta::SetLen { ino, len },
            );
        }
    }

    fn sync(&mut self, c: &Call) {
        let Some(name) = self.fd_name(&c.args[0]) else {
            return;
        };
        let ino = self.ino(&name);
        let of = if c.name == "fdatasync" {
            &self.resized
        } else {
            &self.touched
        };
        let mut floor = of.get(&ino).copied().unwrap_or(0);
        if self.fs.nodes[ino].is_some() {
            // A size that grew is logged at the sync, in the transaction
            // every earlier operation is in: the sync commits it.
            let len = self.fs.len(ino);
            if len > self.synced_len.get(&ino).copied().unwrap_or(0) {
                floor = self.metas;
            }
            self.synced_len.insert(ino, len);
        }
        let shown = if name.is_empty() {
            "the loop directory"
        } else {
            &name
        };
        self.steps.push(Step {
            what: format!("{} {shown}", c.name),
            kind: Kind::Sync { ino, floor },
        });
    }

    fn rename(&mut self, c: &Call, from: (Option<&Arg>, &Arg), to: (Option<&Arg>, &Arg), flags: &str) {
        let (a, b) = (self.joined(from.0, from.1), self.joined(to.0, to.1));
        let (a, b) = match (self.place(&a), self.place(&b)) {
            (Place::Inside(a), Place::Inside(b)) if !a.is_empty() && !b.is_empty() => (a, b),
            (Place::Outside, Place::Outside) => return,
            _ => panic!(
                "{}: a rename across the loop directory's edge is not modelled",
                c.name
            ),
        };
        if flags.split('|').any(|f| f == "RENAME_EXCHANGE") {
            self.meta(
                format!("{}(RENAME_EXCHANGE) {a} {b}", c.name),
                Meta::Exchange { a, b },
            );
        } else {
            let ino = self.ino(&a);
            let replaced = self.fs.names.contains_key(&b);
            let what = format!(
                "{}{} {a} → {b}",
                c.name,
                if flags.is_empty() {
                    ""
                } else {
                    "(RENAME_NOREPLACE)"
                }
            );
            self.meta(
                what,
                Meta::Rename {
                    from: a,
                    to: b,
                    ino,
                    replaced,
                },
            );
        }
    }

    fn link(&mut self, c: &Call, from: (Option<&Arg>, &Arg), to: (Option<&Arg>, &Arg)) {
        let (a, b) = (self.joined(from.0, from.1), self.joined(to.0, to.1));
        if let (Place::Inside(a), Place::Inside(b)) = (self.place(&a), self.place(&b)) {
            let ino = self.ino(&a);
            self.meta(format!("{} {a} → {b}", c.name), Meta::Name { name: b, ino });
        }
    }

    fn unlink(&mut self, c: &Call, dirfd: Option<&Arg>, path: &Arg) {
        let path = self.joined(dirfd, path);
        if let Place::Inside(name) = self.place(&path)
            && self.fs.names.contains_key(&name)
        {
            self.meta(format!("{} {name}", c.name), Meta::Unname { name });
        }
    }

    fn mkdir(&mut self, c: &Call, dirfd: Option<&Arg>, path: &Arg) {
        let path = self.joined(dirfd, path);
        if let Place::Inside(name) = self.place(&path) {
            let ino = self.fs.nodes.len();
            self.fs.nodes.push(None);
            self.meta(format!("{} {name}", c.name), Meta::Name { name, ino });
        }
    }
}

/// The bytes of `writev`'s array of `{iov_base, iov_len}`.
fn iovecs(arg: &Arg) -> Vec<u8> {
    let Arg::List(iov) = arg else {
        panic!("an iovec array: {arg:?}")
    };
    let mut out = Vec::new();
    for v in iov {
        if let Arg::List(fields) = v {
            out.extend_from_slice(fields[0].bytes().unwrap());
        }
    }
    out
}
