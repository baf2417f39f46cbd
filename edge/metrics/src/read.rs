//! Reading the kernel's text files: single values (`cpuacct.usage`, `memory.current`),
//! `key value` tables (`memory.stat`, `cpu.stat`, `/proc/vmstat`) and `/proc/meminfo`.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// At most this many characters of a malformed line go into an error.
const EXCERPT: usize = 120;

/// Reads the whole file; a missing file is [`Error::Missing`].
pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| match source.kind() {
        ErrorKind::NotFound => Error::Missing {
            path: path.to_owned(),
        },
        _ => Error::Io {
            path: path.to_owned(),
            source,
        },
    })
}

/// [`Error::Malformed`] for `line` of `path`.
pub(crate) fn malformed(path: &Path, line: &str, reason: &'static str) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        line: line.chars().take(EXCERPT).collect(),
        reason,
    }
}

/// Parses one decimal `u64` field of `line`.
pub(crate) fn number(path: &Path, line: &str, field: &str) -> Result<u64> {
    field
        .parse()
        .map_err(|_| malformed(path, line, "not an unsigned integer"))
}

/// Reads a file holding one unsigned integer (`cpuacct.usage`, `memory.usage_in_bytes`,
/// `memory.current`).
pub(crate) fn read_u64(path: &Path) -> Result<u64> {
    let text = read(path)?;
    let value = text.trim();
    number(path, value, value)
}

/// The entries of a `key value` file, or of `/proc/meminfo` with its units applied.
#[derive(Debug)]
pub(crate) struct Table {
    path: PathBuf,
    entries: HashMap<String, u64>,
}

impl Table {
    /// Parses `key value` lines (`memory.stat`, `cpu.stat`, `/proc/vmstat`); every non-blank
    /// line must be exactly a key and an unsigned integer.
    pub(crate) fn parse(path: &Path, text: &str) -> Result<Self> {
        let mut entries = HashMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut fields = line.split_whitespace();
            let (Some(key), Some(value), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(malformed(path, line, "expected `key value`"));
            };
            entries.insert(key.to_owned(), number(path, line, value)?);
        }
        Ok(Self {
            path: path.to_owned(),
            entries,
        })
    }

    /// Reads and parses a `key value` file.
    pub(crate) fn read(path: &Path) -> Result<Self> {
        Self::parse(path, &read(path)?)
    }

    /// Parses `/proc/meminfo`: `Key:   value kB` lines, values in bytes (`kB` is KiB, as the
    /// kernel means it); lines without a unit (`HugePages_Total:  0`) are kept as they are.
    pub(crate) fn parse_meminfo(path: &Path, text: &str) -> Result<Self> {
        let mut entries = HashMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Some((key, rest)) = line.split_once(':') else {
                return Err(malformed(path, line, "expected `Key: value [kB]`"));
            };
            let mut fields = rest.split_whitespace();
            let value = match (fields.next(), fields.next(), fields.next()) {
                (Some(v), None, None) => number(path, line, v)?,
                (Some(v), Some("kB"), None) => number(path, line, v)?
                    .checked_mul(1024)
                    .ok_or_else(|| malformed(path, line, "value overflows"))?,
                _ => return Err(malformed(path, line, "expected `Key: value [kB]`")),
            };
            entries.insert(key.trim().to_owned(), value);
        }
        Ok(Self {
            path: path.to_owned(),
            entries,
        })
    }

    /// The entry's value, if present.
    pub(crate) fn get(&self, key: &str) -> Option<u64> {
        self.entries.get(key).copied()
    }

    /// The entry's value, or 0 when absent (cAdvisor's reading of `memory.stat`).
    pub(crate) fn or_zero(&self, key: &str) -> u64 {
        self.get(key).unwrap_or(0)
    }

    /// The entry's value; [`Error::MissingKey`] when absent.
    pub(crate) fn require(&self, key: &'static str) -> Result<u64> {
        self.get(key).ok_or_else(|| Error::MissingKey {
            path: self.path.clone(),
            key,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn table_rejects_a_line_without_a_number() {
        let err = Table::parse(Path::new("memory.stat"), "cache 1\nrss lots\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("memory.stat") && text.contains("rss lots"),
            "{text}"
        );
    }

    #[test]
    fn meminfo_applies_kib() {
        let t = Table::parse_meminfo(Path::new("meminfo"), "MemTotal: 2 kB\nHugePages_Total: 3\n")
            .unwrap();
        assert_eq!(t.get("MemTotal"), Some(2048));
        assert_eq!(t.get("HugePages_Total"), Some(3));
        assert!(Table::parse_meminfo(Path::new("meminfo"), "MemTotal 2 kB\n").is_err());
        assert!(Table::parse_meminfo(Path::new("meminfo"), "MemTotal: 2 MB\n").is_err());
    }

    #[test]
    fn missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpuacct.usage");
        assert!(matches!(read_u64(&path), Err(Error::Missing { path: p }) if p == path));
        std::fs::write(&path, "12x\n").unwrap();
        assert!(matches!(read_u64(&path), Err(Error::Malformed { .. })));
    }
}
