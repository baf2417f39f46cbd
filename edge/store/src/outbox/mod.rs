//! The upstream outbox (architecture.md §3.3: upstream never loses a report), in the same redb file
//! as the objects.
//!
//! Tables:
//! * `outbox`: [`OutboxKey`] text -> `(seq, attempts, message id, the report's wire
//!   encoding)`. The store keeps the encoding as the bytes its caller gives (edgehub encodes
//!   with `verge_proto::envelope::encode` and decodes what it sends; the format is unchanged
//!   since the store held wire `Message`s, so existing databases stay readable);
//! * `outbox_order`: `seq` -> key, to read entries in FIFO order;
//! * `outbox_meta`: `"next_seq"` -> the next sequence number (never reused, so a reader's
//!   cursor only ever moves forward); `"bytes/<source>"` -> the bytes the waiting reports of a
//!   droppable source hold (`event`, `app/<group>`; [`OutboxKey::source`]), each source bounded
//!   by [`OutboxLimits::max_source_bytes`] so one app group's flood cannot crowd out events or
//!   other groups.
//!
//! Writing a key replaces its entry (new seq, attempts 0): only the newest report per key
//! waits. Entries leave only through [`MetaStore::outbox_remove_if`] (the cloud acked that
//! very message id) or when edgehub gives up on a permanently refused report. Every write
//! commits before returning. Calls block on disk I/O (see [`MetaStore::blocking`]).

mod key;
#[cfg(test)]
mod tests;

use redb::{
    ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction,
};
use verge_core::Envelope;

pub use key::OutboxKey;

use crate::MetaStore;
use crate::error::{Error, Result};

/// `outbox`: key -> (seq, attempts, message id, encoded message).
const OUTBOX: TableDefinition<&str, (u64, u32, &str, &[u8])> = TableDefinition::new("outbox");
/// `outbox_order`: seq -> key.
const ORDER: TableDefinition<u64, &str> = TableDefinition::new("outbox_order");
/// `outbox_meta`: counters.
const META: TableDefinition<&str, u64> = TableDefinition::new("outbox_meta");
const NEXT_SEQ: &str = "next_seq";

/// The bounds of [`MetaStore::outbox_put`] (edgecore's `edgeHub.outbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxLimits {
    /// Most entries; a droppable report with a new key is refused beyond it.
    pub max_entries: usize,
    /// Most bytes (key, id and wire encoding) the waiting reports of one droppable source hold.
    pub max_source_bytes: u64,
}

impl OutboxLimits {
    /// `max_entries` entries and no byte bound per source (tests, tools).
    pub fn entries(max_entries: usize) -> Self {
        Self {
            max_entries,
            max_source_bytes: u64::MAX,
        }
    }
}

/// One report waiting for the cloud's ack.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    /// The coalescing key, as stored ([`OutboxKey`]'s text form).
    pub key: String,
    /// FIFO position; larger is newer.
    pub seq: u64,
    /// How many times the cloud refused this message (`error` answers that count).
    pub attempts: u32,
    /// The report's message id.
    pub id: String,
    /// The report's wire encoding, as given to [`MetaStore::outbox_put`].
    pub wire: Vec<u8>,
}

/// Creates the outbox tables in `txn` (part of [`MetaStore::open`]).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(OUTBOX)?;
    txn.open_table(ORDER)?;
    txn.open_table(META)?;
    Ok(())
}

impl MetaStore {
    /// Puts the report `message`, encoded for the wire as `wire`, in the outbox under its key
    /// ([`OutboxKey::of`]), replacing the entry of that key if any, at the end of the FIFO
    /// order; commits before returning.
    ///
    /// # Errors
    /// [`Error::NotAReport`] when `message` has no outbox key; [`Error::OutboxFull`] when the
    /// key is droppable ([`OutboxKey::is_droppable`]), not yet in the outbox, and
    /// `limits.max_entries` entries already wait; [`Error::OutboxSourceFull`] when its source's
    /// waiting reports would pass `limits.max_source_bytes`; nothing changes then.
    /// [`Error::Store`] if the transaction fails.
    pub fn outbox_put(&self, message: &Envelope, wire: &[u8], limits: OutboxLimits) -> Result<()> {
        let txn = self.db.begin_write()?;
        put_in(&txn, message, wire, limits)?;
        txn.commit()?;
        Ok(())
    }

    /// Up to `limit` entries with a seq greater than `after` (all if `None`), in FIFO order.
    ///
    /// # Errors
    /// [`Error::Store`] if the read fails.
    pub fn outbox_after(&self, after: Option<u64>, limit: usize) -> Result<Vec<OutboxEntry>> {
        let txn = self.db.begin_read()?;
        let outbox = txn.open_table(OUTBOX)?;
        let order = txn.open_table(ORDER)?;
        let start = after.map_or(0, |s| s.saturating_add(1));
        let mut out = Vec::new();
        for row in order.range(start..)? {
            if out.len() >= limit {
                break;
            }
            let (_, key) = row?;
            if let Some(v) = outbox.get(key.value())? {
                out.push(decode(key.value(), v.value()));
            }
        }
        Ok(out)
    }

    /// The entry of the stored `key` (text form), if any.
    ///
    /// # Errors
    /// [`Error::Store`] if the read fails.
    pub fn outbox_get(&self, key: &str) -> Result<Option<OutboxEntry>> {
        let txn = self.db.begin_read()?;
        let outbox = txn.open_table(OUTBOX)?;
        Ok(outbox.get(key)?.map(|v| decode(key, v.value())))
    }

    /// How many entries wait.
    ///
    /// # Errors
    /// [`Error::Store`] if the read fails.
    pub fn outbox_len(&self) -> Result<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(OUTBOX)?.len()?)
    }

    /// Removes the entry of `key` if it still holds the message `id` (a newer report of the
    /// same key stays); commits before returning. Returns whether it was removed.
    ///
    /// # Errors
    /// [`Error::Store`] if the transaction fails.
    pub fn outbox_remove_if(&self, key: &str, id: &str) -> Result<bool> {
        let txn = self.db.begin_write()?;
        let removed = {
            let mut outbox = txn.open_table(OUTBOX)?;
            let seq = match outbox.get(key)? {
                Some(v) if v.value().2 == id => Some(v.value().0),
                _ => None,
            };
            if let Some(seq) = seq {
                let size = outbox
                    .remove(key)?
                    .map_or(0, |v| entry_size(key, v.value()));
                txn.open_table(ORDER)?.remove(seq)?;
                add_source_bytes(&txn, key, -i128::from(size))?;
            }
            seq.is_some()
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Records a refusal of message `id` of `key`: when the entry still holds `id`, adds 1
    /// to its attempts if `count` and returns the attempts so far; `None` when the entry is
    /// gone or holds a newer report.
    ///
    /// # Errors
    /// [`Error::Store`] if the transaction fails.
    pub fn outbox_refused(&self, key: &str, id: &str, count: bool) -> Result<Option<u32>> {
        let txn = self.db.begin_write()?;
        let attempts = {
            let mut outbox = txn.open_table(OUTBOX)?;
            let current = match outbox.get(key)? {
                Some(v) if v.value().2 == id => {
                    let (seq, attempts, _, bytes) = v.value();
                    Some((seq, attempts, bytes.to_vec()))
                }
                _ => None,
            };
            match current {
                Some((seq, attempts, bytes)) if count => {
                    let attempts = attempts.saturating_add(1);
                    outbox.insert(key, (seq, attempts, id, bytes.as_slice()))?;
                    Some(attempts)
                }
                other => other.map(|(_, attempts, _)| attempts),
            }
        };
        txn.commit()?;
        Ok(attempts)
    }
}

/// [`MetaStore::outbox_put`] inside the caller's transaction `txn`
/// ([`crate::Transaction::outbox_put`]), so that a report commits together with the state it
/// reports. Nothing is committed here.
pub(crate) fn put_in(
    txn: &WriteTransaction,
    message: &Envelope,
    wire: &[u8],
    limits: OutboxLimits,
) -> Result<()> {
    let key = OutboxKey::of(message).ok_or_else(|| Error::NotAReport {
        message: message.to_string(),
    })?;
    let droppable = key.is_droppable();
    let source = key.source();
    let key = key.to_string();
    let id = message.id.as_str();
    let mut outbox = txn.open_table(OUTBOX)?;
    let mut order = txn.open_table(ORDER)?;
    let mut meta = txn.open_table(META)?;
    let old = outbox
        .get(key.as_str())?
        .map(|g| (g.value().0, entry_size(&key, g.value())));
    let new_size = entry_size(&key, (0, 0, id, wire));
    if let Some(source) = &source {
        let held = meta
            .get(format!("bytes/{source}").as_str())?
            .map_or(0, |g| g.value());
        let after = held.saturating_sub(old.map_or(0, |(_, size)| size)) + new_size;
        if after > limits.max_source_bytes {
            return Err(Error::OutboxSourceFull {
                key,
                source_name: source.clone(),
                bytes: held,
            });
        }
    }
    match old {
        Some((old_seq, _)) => {
            order.remove(old_seq)?;
        }
        None if droppable => {
            let entries = outbox.len()?;
            if entries >= u64::try_from(limits.max_entries).unwrap_or(u64::MAX) {
                return Err(Error::OutboxFull { key, entries });
            }
        }
        None => {}
    }
    let seq = meta.get(NEXT_SEQ)?.map_or(0, |g| g.value());
    meta.insert(NEXT_SEQ, seq + 1)?;
    drop(meta);
    outbox.insert(key.as_str(), (seq, 0, id, wire))?;
    order.insert(seq, key.as_str())?;
    let change = i128::from(new_size) - i128::from(old.map_or(0, |(_, size)| size));
    add_source_bytes(txn, &key, change)
}

/// The bytes entry `key` counts with in its source's budget: key, id and wire encoding.
fn entry_size(key: &str, (_, _, id, wire): (u64, u32, &str, &[u8])) -> u64 {
    (key.len() + id.len() + wire.len()) as u64
}

/// Adds `change` to the bytes of the source of the stored `key` (nothing for a key of no
/// droppable source).
fn add_source_bytes(txn: &WriteTransaction, key: &str, change: i128) -> Result<()> {
    let Some(source) = OutboxKey::source_of(key) else {
        return Ok(());
    };
    let mut meta = txn.open_table(META)?;
    let name = format!("bytes/{source}");
    let held = meta.get(name.as_str())?.map_or(0, |g| g.value());
    let after = (i128::from(held) + change).clamp(0, i128::from(u64::MAX));
    meta.insert(name.as_str(), u64::try_from(after).unwrap_or(0))?;
    Ok(())
}

fn decode(key: &str, (seq, attempts, id, wire): (u64, u32, &str, &[u8])) -> OutboxEntry {
    OutboxEntry {
        key: key.to_owned(),
        seq,
        attempts,
        id: id.to_owned(),
        wire: wire.to_vec(),
    }
}
