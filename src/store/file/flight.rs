//! `.state.flight`: the file store's record of a tick's `in_flight` commit,
//! written in place. It holds the version it commits (one past the state
//! file's), the whole state with `in_flight` set and that commit's events,
//! under a SHA-256 checksum. The file is made once per loop, sized in whole
//! blocks and never shrunk, and each record is one `pwrite` at offset 0:
//! a write allocates nothing and frees nothing, so it costs one data write
//! (and one flush when synced) where a replaced file costs an inode, a
//! block, a rename and a discard.
//!
//! A record counts only when it is whole (its checksum holds) and its
//! version is exactly the state file's + 1; a torn record (a writer killed
//! mid-write, a power loss, a reader racing the write) and a stale one (an
//! earlier tick's, which the state file has passed) are passed over.
//! docs/store.md gives the crash argument.

use crate::os::FileExt;
use std::fs::File;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsx;
use crate::history::Event;
use crate::state::{SCHEMA, State};

/// The first bytes of every record.
const MAGIC: &[u8; 8] = b"atflight";
/// Magic, version (u64 LE), payload length (u64 LE), SHA-256 of the first
/// 24 bytes and the payload.
const HEADER: usize = 8 + 8 + 8 + 32;
/// Records are written, and the file grown, in whole blocks of this size.
const BLOCK: usize = 4096;
/// The largest payload read: a state (at most 16 MiB) and its events.
const PAYLOAD_MAX: u64 = 48 * 1024 * 1024;

/// One `in_flight` commit: the state of `version` and its events, stamped
/// with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Flight {
    pub state: State,
    pub events: Vec<Event>,
}

impl Flight {
    pub(super) fn version(&self) -> u64 {
        self.state.version
    }
}

/// What the record file holds, read against the version it must have.
#[derive(Debug)]
pub(super) enum Found {
    /// No record file, or one never written (all zeros).
    Missing,
    /// A whole record of the version asked for: committed.
    Whole(Box<Flight>),
    /// A record of an earlier version than the one asked for: an earlier
    /// tick's, which the state file has passed.
    Stale,
    /// A record of a later version than the one asked for: the state file
    /// read before it is no longer the newest.
    Newer(u64),
    /// A record whose header or checksum does not hold: cut short by a
    /// crash, or being written while it was read.
    Torn,
}

/// Reads the record at `path`, expecting `version`. Only a record of that
/// version is read whole and checked; others are told apart by their header.
/// A whole record whose contents do not parse as this build's state and
/// events is an error naming the file (it is never passed over: it may be
/// the only record of a commit).
pub(super) fn read(path: &Path, version: u64) -> Result<Found> {
    let Some((file, len)) = fsx::open_read(path)? else {
        return Ok(Found::Missing);
    };
    let mut header = [0u8; HEADER];
    if len < HEADER as u64 {
        return Ok(if len == 0 { Found::Missing } else { Found::Torn });
    }
    file.read_exact_at(&mut header, 0)
        .map_err(Error::io("reading", path))?;
    if header.iter().all(|&b| b == 0) {
        return Ok(Found::Missing);
    }
    if &header[..8] != MAGIC {
        return Ok(Found::Torn);
    }
    let found = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let size = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    if found < version {
        return Ok(Found::Stale);
    }
    if found > version {
        return Ok(Found::Newer(found));
    }
    if size > PAYLOAD_MAX || size > len - HEADER as u64 {
        return Ok(Found::Torn);
    }
    let mut payload = vec![0u8; size as usize];
    file.read_exact_at(&mut payload, HEADER as u64)
        .map_err(Error::io("reading", path))?;
    if checksum(&header[..24], &payload)[..] != header[24..] {
        return Ok(Found::Torn);
    }
    let damaged = |reason: String| Error::CorruptState {
        path: path.to_owned(),
        reason,
    };
    let flight: Flight = serde_json::from_slice(&payload)
        .map_err(|e| damaged(format!("its checksum holds but it does not parse ({e})")))?;
    if flight.state.schema != SCHEMA {
        return Err(Error::UnknownSchema {
            path: path.to_owned(),
            found: u64::from(flight.state.schema),
            expected: SCHEMA,
        });
    }
    if flight.state.version != found {
        return Err(damaged(format!(
            "its header says version {found} but its state says {}",
            flight.state.version
        )));
    }
    Ok(Found::Whole(Box::new(flight)))
}

/// Writes `flight` over the record at `path` with one `pwrite` at offset
/// 0, making the file on first use; with `sync`, flushes it and the
/// directory `dir` to disk before returning (the file may have been made
/// by an unsynced write, and its name must survive a power loss too). The
/// file only ever grows, in whole blocks.
pub(super) fn write(dir: &Path, path: &Path, flight: &Flight, sync: bool) -> Result<()> {
    let (file, len) = fsx::open_rw(path)?;
    let bytes = encode(flight, len);
    write_at(&file, &bytes, sync).map_err(Error::io("writing", path))?;
    if sync {
        fsx::sync_dir(dir)?;
    }
    Ok(())
}

fn write_at(file: &File, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    file.write_all_at(bytes, 0)?;
    if sync {
        file.sync_data()?;
    }
    Ok(())
}

/// The record's bytes, padded with zeros to whole blocks. A record that
/// outgrows the file (`len` bytes) grows it with a quarter to spare, so a
/// state that grows slowly does not grow the file at every tick.
fn encode(flight: &Flight, len: u64) -> Vec<u8> {
    let payload = serde_json::to_vec(flight).expect("a state and its events serialise");
    let mut bytes = Vec::with_capacity(HEADER + payload.len() + BLOCK);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&flight.version().to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let sum = checksum(&bytes, &payload);
    bytes.extend_from_slice(&sum);
    bytes.extend_from_slice(&payload);
    let need = bytes.len();
    let target = if need as u64 <= len {
        need.next_multiple_of(BLOCK)
    } else {
        (need + need / 4).next_multiple_of(BLOCK)
    };
    bytes.resize(target, 0);
    bytes
}

fn checksum(head: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(head);
    h.update(payload);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::EventKind;

    fn flight(version: u64, note: &str) -> Flight {
        let mut state = State::new(crate::clock::now());
        state.version = version;
        Flight {
            state,
            events: vec![Event::stamped(
                EventKind::Paused {
                    by: "ann".into(),
                    reason: Some(note.into()),
                },
                version,
                crate::clock::now(),
                &crate::who::identify("ann", None, &[]),
            )],
        }
    }

    fn setup() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".state.flight");
        (dir, path)
    }

    #[test]
    fn a_whole_record_reads_back_only_at_its_version() {
        let (d, path) = setup();
        assert!(matches!(read(&path, 3).unwrap(), Found::Missing));
        write(d.path(), &path, &flight(3, "x"), true).unwrap();
        match read(&path, 3).unwrap() {
            Found::Whole(f) => {
                assert_eq!(f.version(), 3);
                assert_eq!(f.events.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(read(&path, 4).unwrap(), Found::Stale));
        assert!(matches!(read(&path, 2).unwrap(), Found::Newer(3)));
        assert_eq!(std::fs::metadata(&path).unwrap().len() % BLOCK as u64, 0);
    }

    #[test]
    fn the_file_never_shrinks_and_grows_in_blocks() {
        let (d, path) = setup();
        write(d.path(), &path, &flight(1, &"x".repeat(20_000)), false).unwrap();
        let big = std::fs::metadata(&path).unwrap().len();
        write(d.path(), &path, &flight(3, "short"), false).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), big);
        assert!(matches!(read(&path, 3).unwrap(), Found::Whole(_)));
    }

    #[test]
    fn every_flipped_byte_and_every_cut_is_torn() {
        let (d, path) = setup();
        write(d.path(), &path, &flight(5, "flip me"), false).unwrap();
        let good = std::fs::read(&path).unwrap();
        let used = HEADER + u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
        // Every byte of the header, and
        // a spread of the payload's.
        let mut at: Vec<usize> = (0..HEADER).collect();
        at.extend((HEADER..used).step_by(7));
        for i in at {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            match read(&path, 5).unwrap() {
                Found::Torn | Found::Stale | Found::Newer(_) => {}
                other => panic!("byte {i} flipped: {other:?}"),
            }
        }
        for cut in [1, HEADER - 1, HEADER + 1, used - 1] {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert!(matches!(read(&path, 5).unwrap(), Found::Torn), "cut at {cut}");
        }
        // A new record written over half of an old one.
        std::fs::write(&path, &good).unwrap();
        let newer = encode(&flight(7, &"y".repeat(3000)), good.len() as u64);
        let mut mixed = good.clone();
        mixed[..HEADER + 100].copy_from_slice(&newer[..HEADER + 100]);
        std::fs::write(&path, &mixed).unwrap();
        assert!(matches!(read(&path, 7).unwrap(), Found::Torn));
    }

    #[test]
    fn a_whole_record_that_does_not_parse_is_an_error() {
        let (_d, path) = setup();
        let payload = b"{\"state\": 1}";
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        let sum = checksum(&bytes, payload);
        bytes.extend_from_slice(&sum);
        bytes.extend_from_slice(payload);
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(read(&path, 2), Err(Error::CorruptState { .. })));
    }
}
