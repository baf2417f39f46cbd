//! The apps inbox: downstream messages of third-party groups, committed before they are
//! acknowledged to the cloud and kept until the MQTT broker acknowledged their publish
//! (`PUBACK`), in `edgecore.redb` beside the objects and the outbox.
//!
//! Tables: `apps_inbox` (sequence number -> message id, published flag, topic, payload; the
//! order of publishing), `apps_seen` (message id -> sequence number: a message cloudhub
//! resends, same id, is recognised and not published twice) and `apps_meta` (the next
//! sequence number, the count of unpublished entries and their bytes, topic and payload). Published entries keep only their
//! id, and the oldest are forgotten beyond [`KEEP_PUBLISHED`].

use redb::{
    ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction,
};

use crate::MetaStore;
use crate::error::Result;

/// `apps_inbox`: sequence -> (id, published, topic, payload).
const INBOX: TableDefinition<u64, (&str, bool, &str, &[u8])> = TableDefinition::new("apps_inbox");
/// `apps_seen`: message id -> sequence.
const SEEN: TableDefinition<&str, u64> = TableDefinition::new("apps_seen");
/// `apps_meta`: `next` (sequence), `pending` (unpublished entries), `pending_bytes` (their
/// topics' and payloads' bytes).
const META: TableDefinition<&str, u64> = TableDefinition::new("apps_meta");

/// Published message ids remembered to recognise resends (cloudhub resends within
/// `ackTimeout × maxRetries`, a minute by default).
pub const KEEP_PUBLISHED: u64 = 4096;

/// Creates the tables (at open).
pub(crate) fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(INBOX)?;
    txn.open_table(SEEN)?;
    txn.open_table(META)?;
    Ok(())
}

/// What [`MetaStore::app_inbox_put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxPut {
    /// Committed as entry `seq`, to be published.
    Added(u64),
    /// A message with this id is in the inbox already, or was published: nothing changed.
    Duplicate,
    /// `max_pending` messages, or `max_pending_bytes` bytes of topics and payloads, wait to
    /// be published (or this one would pass the bytes): refused, nothing changed.
    Full,
}

/// An entry waiting to be published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Its sequence number (the order of publishing).
    pub seq: u64,
    /// The message id.
    pub id: String,
    /// The MQTT topic.
    pub topic: String,
    /// The MQTT payload.
    pub payload: Vec<u8>,
}

impl MetaStore {
    /// Commits message `id` for publishing on `topic` with `payload`, unless it is known,
    /// `max_pending` messages wait already, or the waiting topics and payloads with this one
    /// would pass `max_pending_bytes` (issue 31: a controller flooding a group's apps while
    /// the broker is away fills the store at most that much).
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the transaction fails; nothing
    /// is changed then.
    pub fn app_inbox_put(
        &self,
        id: &str,
        topic: &str,
        payload: &[u8],
        max_pending: u64,
        max_pending_bytes: u64,
    ) -> Result<InboxPut> {
        let size = (topic.len() + payload.len()) as u64;
        let txn = self.db.begin_write()?;
        let outcome = {
            let mut seen = txn.open_table(SEEN)?;
            let mut meta = txn.open_table(META)?;
            let pending = meta.get("pending")?.map_or(0, |v| v.value());
            let bytes = meta.get("pending_bytes")?.map_or(0, |v| v.value());
            if seen.get(id)?.is_some() {
                InboxPut::Duplicate
            } else if pending >= max_pending || bytes.saturating_add(size) > max_pending_bytes {
                InboxPut::Full
            } else {
                let seq = meta.get("next")?.map_or(0, |v| v.value());
                meta.insert("next", seq + 1)?;
                meta.insert("pending", pending + 1)?;
                meta.insert("pending_bytes", bytes + size)?;
                seen.insert(id, seq)?;
                txn.open_table(INBOX)?
                    .insert(seq, (id, false, topic, payload))?;
                InboxPut::Added(seq)
            }
        };
        if matches!(outcome, InboxPut::Added(_)) {
            txn.commit()?;
        }
        Ok(outcome)
    }

    /// Every unpublished entry, oldest first.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the read fails.
    pub fn app_inbox_pending(&self) -> Result<Vec<Pending>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(INBOX)?;
        let mut pending = Vec::new();
        for row in table.iter()? {
            let (seq, value) = row?;
            let (id, published, topic, payload) = value.value();
            if !published {
                pending.push(Pending {
                    seq: seq.value(),
                    id: id.to_owned(),
                    topic: topic.to_owned(),
                    payload: payload.to_vec(),
                });
            }
        }
        Ok(pending)
    }

    /// The broker acknowledged entry `seq`: it keeps only its id (to recognise a resend),
    /// and the oldest published entries beyond `keep` ([`KEEP_PUBLISHED`] in edgecore) are
    /// forgotten. Unknown or already published: nothing changes.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the transaction fails.
    pub fn app_inbox_published(&self, seq: u64, keep: u64) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut inbox = txn.open_table(INBOX)?;
            let mut meta = txn.open_table(META)?;
            let (id, size) = match inbox.get(seq)? {
                Some(row) if !row.value().1 => {
                    let (id, _, topic, payload) = row.value();
                    (id.to_owned(), (topic.len() + payload.len()) as u64)
                }
                _ => return Ok(()),
            };
            inbox.insert(seq, (id.as_str(), true, "", &[][..]))?;
            let pending = meta.get("pending")?.map_or(0, |v| v.value());
            meta.insert("pending", pending.saturating_sub(1))?;
            let bytes = meta.get("pending_bytes")?.map_or(0, |v| v.value());
            meta.insert("pending_bytes", bytes.saturating_sub(size))?;
            let pending = pending.saturating_sub(1);
            let mut seen = txn.open_table(SEEN)?;
            while inbox.len()? > pending + keep {
                let (first, old_id, published) = match inbox.first()? {
                    Some((first, value)) => {
                        let v = value.value();
                        (first.value(), v.0.to_owned(), v.1)
                    }
                    None => break,
                };
                if !published {
                    break;
                }
                inbox.remove(first)?;
                seen.remove(old_id.as_str())?;
            }
        }
        txn.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_bytes_are_bounded_and_come_back_when_published() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetaStore::open(&dir.path().join("s.redb")).expect("open");
        let payload = [0u8; 100];
        // Topic "t" + 100 bytes: two fit in 250 bytes, the third does not.
        let put = |id: &str| {
            store
                .app_inbox_put(id, "t", &payload, 100, 250)
                .expect("put")
        };
        let (a, b) = (put("a"), put("b"));
        assert!(matches!((a, b), (InboxPut::Added(_), InboxPut::Added(_))));
        assert_eq!(put("c"), InboxPut::Full);
        let InboxPut::Added(seq) = a else {
            unreachable!()
        };
        store
            .app_inbox_published(seq, KEEP_PUBLISHED)
            .expect("published");
        assert!(
            matches!(put("c"), InboxPut::Added(_)),
            "a's bytes are free again"
        );
        assert_eq!(store.app_inbox_pending().expect("pending").len(), 2);
    }

    #[test]
    fn resends_are_recognised_until_long_after_publishing_and_entries_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.redb");
        {
            let store = MetaStore::open(&path).expect("open");
            assert_eq!(
                store
                    .app_inbox_put("a", "t/a", b"1", 2, u64::MAX)
                    .expect("put"),
                InboxPut::Added(0)
            );
            assert_eq!(
                store
                    .app_inbox_put("a", "t/a", b"1", 2, u64::MAX)
                    .expect("put"),
                InboxPut::Duplicate
            );
            assert_eq!(
                store
                    .app_inbox_put("b", "t/b", b"2", 2, u64::MAX)
                    .expect("put"),
                InboxPut::Added(1)
            );
            assert_eq!(
                store
                    .app_inbox_put("c", "t/c", b"3", 2, u64::MAX)
                    .expect("put"),
                InboxPut::Full
            );
        }
        let store = MetaStore::open(&path).expect("reopen");
        let pending = store.app_inbox_pending().expect("pending");
        assert_eq!(
            pending.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(pending[1].topic, "t/b");
        store
            .app_inbox_published(0, KEEP_PUBLISHED)
            .expect("published");
        store
            .app_inbox_published(0, KEEP_PUBLISHED)
            .expect("again: no change");
        assert_eq!(store.app_inbox_pending().expect("pending").len(), 1);
        assert_eq!(
            store
                .app_inbox_put("a", "t/a", b"1", 2, u64::MAX)
                .expect("put"),
            InboxPut::Duplicate,
            "a published message is still recognised"
        );
        assert_eq!(
            store
                .app_inbox_put("c", "t/c", b"3", 2, u64::MAX)
                .expect("put"),
            InboxPut::Added(2)
        );
        assert!(store.identities().expect("inventory").is_empty());
    }

    #[test]
    fn the_oldest_published_ids_are_forgotten_beyond_the_bound() {
        const KEEP: u64 = 4;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MetaStore::open(&dir.path().join("s.redb")).expect("open");
        for i in 0..KEEP + 3 {
            let id = format!("m-{i}");
            assert_eq!(
                store
                    .app_inbox_put(&id, "t", b"", 10, u64::MAX)
                    .expect("put"),
                InboxPut::Added(i)
            );
            store.app_inbox_published(i, KEEP).expect("published");
        }
        assert_eq!(
            store
                .app_inbox_put("m-0", "t", b"", 10, u64::MAX)
                .expect("put"),
            InboxPut::Added(KEEP + 3),
            "forgotten"
        );
        let last = format!("m-{}", KEEP + 2);
        assert_eq!(
            store
                .app_inbox_put(&last, "t", b"", 10, u64::MAX)
                .expect("put"),
            InboxPut::Duplicate
        );
    }
}
