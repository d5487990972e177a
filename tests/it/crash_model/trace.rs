//! Reading a trace written by `strace -f -y -xx`: each line's system call,
//! its arguments and its result. With `-xx` every string is hex escapes,
//! so no quote, comma or bracket inside one can mislead the reader; with
//! `-y` every file descriptor (and `AT_FDCWD`) carries the path it is open
//! on, `3<\x2f...>`, which is how writes are tied to files. A call that
//! strace split across two lines (`<unfinished ...>`, then `<... resumed>`)
//! is joined into one.

use std::collections::HashMap;

/// One completed system call.
#[derive(Debug)]
pub(super) struct Call {
    pub name: String,
    pub args: Vec<Arg>,
    /// The result, or `None` when the call failed (or never returned).
    pub ret: Option<Ret>,
}

/// A successful call's result: the number and, for a new descriptor, the
/// path it is open on.
#[derive(Debug)]
pub(super) struct Ret {
    pub value: i64,
    pub path: Option<Vec<u8>>,
}

/// One argument as strace prints it.
#[derive(Debug)]
pub(super) enum Arg {
    /// A string; `cut` when strace printed only its start (`"..."...`).
    Str { bytes: Vec<u8>, cut: bool },
    /// A descriptor (or `AT_FDCWD`) with the path `-y` showed for it.
    Fd { fd: String, path: Vec<u8> },
    /// An array or a structure (`[...]`, `{...}`), its fields' values in
    /// order, their names dropped.
    List(Vec<Arg>),
    /// Anything else: a number, flags (`O_WRONLY|O_CREAT`), a constant.
    Atom(String),
}

impl Arg {
    pub(super) fn path(&self) -> Option<&[u8]> {
        match self {
            Arg::Fd { path, .. } => Some(path),
            _ => None,
        }
    }

    pub(super) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Arg::Str { bytes, cut: false } => Some(bytes),
            Arg::Str { cut: true, .. } => panic!("strace cut a string short: raise -s"),
            _ => None,
        }
    }

    pub(super) fn atom(&self) -> &str {
        match self {
            Arg::Atom(a) => a,
            Arg::Fd { fd, .. } => fd,
            _ => "",
        }
    }

    pub(super) fn number(&self) -> Option<u64> {
        self.atom().parse().ok()
    }
}

/// Every completed call in `text`, in the order they completed.
pub(super) fn parse(text: &str) -> Vec<Call> {
    let mut pending: HashMap<&str, String> = HashMap::new();
    let mut calls = Vec::new();
    for line in text.lines() {
        let (pid, rest) = match line.split_once(char::is_whitespace) {
            Some((p, r)) if p.bytes().all(|b| b.is_ascii_digit()) => (p, r.trim_start()),
            _ => ("", line),
        };
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        let whole = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, start.to_owned());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = tail.split_once(" resumed>") else {
                continue;
            };
            let Some(start) = pending.remove(pid) else {
                continue;
            };
            start + tail
        } else {
            rest.to_owned()
        };
        if let Some(call) = parse_call(&whole) {
            calls.push(call);
        }
    }
    calls
}

/// `name(args) = ret`, or `None` for a line that is no call.
fn parse_call(text: &str) -> Option<Call> {
    let open = text.find('(')?;
    let name = &text[..open];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    // No hex string holds ") = ", so the last one ends the arguments.
    let close = text.rfind(") = ")?;
    let args = Lexer::new(&text[open + 1..close]).list(None);
    let ret = parse_ret(&text[close + 4..]);
    Some(Call {
        name: name.to_owned(),
        args,
        ret,
    })
}

/// `3<\x2f...>`, `0`, `-1 ENOENT (...)`, `?`.
fn parse_ret(text: &str) -> Option<Ret> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let value = text[..digits].parse().ok()?;
    let rest = &text[digits..];
    let path = rest
        .strip_prefix('<')
        .and_then(|r| r.split_once('>'))
        .map(|(p, _)| unescape(p));
    Some(Ret { value, path })
}

/// The bytes strace's escapes stand for.
fn unescape(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 4);
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1] == b'x' {
            let hex = std::str::from_utf8(&b[i + 2..i + 4]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Reads strace's argument syntax: strings, `[...]`, `{name=value, ...}`,
/// atoms with an optional `<path>`.
struct Lexer<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Lexer<'a> {
        Lexer {
            b: text.as_bytes(),
            i: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|c| c == b' ' || c == b',') {
            self.i += 1;
        }
    }

    /// Values up to `end` (or the end of the text).
    fn list(&mut self, end: Option<u8>) -> Vec<Arg> {
        let mut out = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                None => return out,
                Some(c) if Some(c) == end => {
                    self.i += 1;
                    return out;
                }
                Some(_) => out.push(self.value()),
            }
        }
    }

    fn value(&mut self) -> Arg {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'[') => {
                self.i += 1;
                Arg::List(self.list(Some(b']')))
            }
            Some(b'{') => {
                self.i += 1;
                Arg::List(self.list(Some(b'}')))
            }
            _ => self.atom(),
        }
    }

    fn string(&mut self) -> Arg {
        self.i += 1;
        let start = self.i;
        while self.peek().is_some_and(|c| c != b'"') {
            self.i += 1;
        }
        let bytes = unescape(&String::from_utf8_lossy(&self.b[start..self.i]));
        self.i += 1;
        let cut = self.b[self.i..].starts_with(b"...");
        if cut {
            self.i += 3;
        }
        Arg::Str { bytes, cut }
    }

    /// An atom; `name=` before a value is dropped, `<path>` after one kept.
    fn atom(&mut self) -> Arg {
        let start = self.i;
        while let Some(c) = self.peek() {
            match c {
                b',' | b']' | b'}' => break,
                b'=' => {
                    self.i += 1;
                    return self.value();
                }
                b'<' => {
                    let fd = String::from_utf8_lossy(&self.b[start..self.i]).trim().to_owned();
                    let from = self.i + 1;
                    while self.peek().is_some_and(|c| c != b'>') {
                        self.i += 1;
                    }
                    let path = unescape(&String::from_utf8_lossy(&self.b[from..self.i]));
                    self.i += 1;
                    return Arg::Fd { fd, path };
                }
                _ => self.i += 1,
            }
        }
        Arg::Atom(String::from_utf8_lossy(&self.b[start..self.i]).trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_read_with_their_paths_and_data() {
        let text = "\
7 openat(AT_FDCWD<\\x2f\\x74>, \"\\x61\", O_WRONLY|O_CREAT, 0666) = 3<\\x2f\\x74\\x2f\\x61>
7 writev(3<\\x2f\\x74\\x2f\\x61>, [{iov_base=\"\\x68\\x69\", iov_len=2}, {iov_base=\"\\x21\", iov_len=1}], 2 <unfinished ...>
8 +++ exited with 0 +++
7 <... writev resumed>) = 3
7 unlink(\"\\x62\") = -1 ENOENT (No such file or directory)
";
        let calls = parse(text);
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].name, "openat");
        assert_eq!(calls[0].args[0].path(), Some(&b"/t"[..]));
        assert_eq!(calls[0].args[1].bytes(), Some(&b"a"[..]));
        assert_eq!(calls[0].args[2].atom(), "O_WRONLY|O_CREAT");
        assert_eq!(calls[0].ret.as_ref().unwrap().path.as_deref(), Some(&b"/t/a"[..]));
        let Arg::List(iov) = &calls[1].args[1] else {
            panic!("{:?}", calls[1].args)
        };
        let Arg::List(first) = &iov[0] else { panic!() };
        assert_eq!(first[0].bytes(), Some(&b"hi"[..]));
        assert_eq!(first[1].number(), Some(2));
        assert_eq!(calls[1].ret.as_ref().unwrap().value, 3);
        assert!(calls[2].ret.is_none());
    }
}
