//! Mount points under a directory, and unmounting them: what a killed kubelet or edgecore
//! leaves in its state directory (pod volumes, overlays, network namespaces).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::bail;

/// Mount points at or below `prefix` (from `/proc/self/mountinfo`).
pub fn mounts_under(prefix: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(prefix))
        .collect()
}

/// Decodes the octal escapes (`\040` for a space) of a mountinfo path.
fn unescape_mountinfo(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            d.iter()
                .all(|b| (b'0'..=b'7').contains(b))
                .then(|| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok())
                .flatten()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Lazily unmounts everything mounted at or below `prefix` (pod volumes, rootfs overlays,
/// network namespaces, the kubelet's shared root bind mount), deepest first, until none
/// is left.
///
/// # Errors
/// Mounts are still there after ten rounds.
pub fn unmount_under(prefix: &Path) -> anyhow::Result<()> {
    for _ in 0..10 {
        let mut mounts = mounts_under(prefix);
        if mounts.is_empty() {
            return Ok(());
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        mounts.dedup();
        for m in mounts {
            let _ = Command::new("umount").arg("-l").arg(&m).output();
        }
    }
    let left = mounts_under(prefix);
    if left.is_empty() {
        Ok(())
    } else {
        bail!("mounts left under {}: {left:?}", prefix.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mountinfo(r"/plain\x"), r"/plain\x");
    }
}
