//! Files read out of images ([`ContainerRuntime::read_image_file`](super::ContainerRuntime)):
//! a container is created from the image (never started, without the node's
//! [`labels::MANAGED`](super::labels::MANAGED) label, so edged's garbage collection leaves it
//! alone while it lives), the path is read as a tar archive through
//! `GET /containers/{id}/archive`, and the container is removed again whatever happened.

use std::io::Read as _;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures::TryStreamExt as _;

use super::docker::{DockerRuntime, err};
use super::{Result, RuntimeError};

impl DockerRuntime {
    /// See [`ContainerRuntime::read_image_file`](super::ContainerRuntime::read_image_file).
    pub(super) async fn image_file(&self, image: &str, path: &str, limit: u64) -> Result<Vec<u8>> {
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            // Never run: an image without a command cannot be created without one.
            cmd: Some(vec!["/nonexistent".to_owned()]),
            network_disabled: Some(true),
            ..ContainerCreateBody::default()
        };
        let created = self
            .docker
            .create_container(None, body)
            .await
            .map_err(err(format!("create a container of {image}")))?;
        let read = self.archive_file(&created.id, image, path, limit).await;
        let options = RemoveContainerOptionsBuilder::default().force(true).build();
        if let Err(e) = self
            .docker
            .remove_container(&created.id, Some(options))
            .await
        {
            tracing::warn!(id = %created.id, error = %e, "container of an image read not removed");
        }
        read
    }

    async fn archive_file(&self, id: &str, image: &str, path: &str, limit: u64) -> Result<Vec<u8>> {
        let op = format!("read {path} of {image}");
        let options = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let mut archive = Vec::new();
        // The archive holds the file and a header or two: a little more than `limit`.
        let bound = usize::try_from(limit.saturating_add(64 * 1024)).unwrap_or(usize::MAX);
        let mut stream = std::pin::pin!(self.docker.download_from_container(id, Some(options)));
        while let Some(chunk) = stream.try_next().await.map_err(err(op.clone()))? {
            if archive.len() + chunk.len() > bound {
                return Err(engine(&op, format!("larger than {limit} bytes")));
            }
            archive.extend_from_slice(&chunk);
        }
        first_regular_file(&archive, limit).map_err(|reason| engine(&op, reason))
    }
}

fn engine(op: &str, reason: String) -> RuntimeError {
    RuntimeError::Engine {
        op: op.to_owned(),
        source: reason.into(),
    }
}

/// The content of the archive's first entry, which must be a regular file of at most `limit`
/// bytes (Docker's archive of a file path holds that file alone; of a symlink, the link).
fn first_regular_file(archive: &[u8], limit: u64) -> std::result::Result<Vec<u8>, String> {
    let mut archive = tar::Archive::new(archive);
    let mut entries = archive.entries().map_err(|e| e.to_string())?;
    let mut entry = entries
        .next()
        .ok_or("the archive is empty")?
        .map_err(|e| e.to_string())?;
    let kind = entry.header().entry_type();
    if !kind.is_file() {
        return Err(format!("not a regular file ({kind:?})"));
    }
    let size = entry.header().size().map_err(|e| e.to_string())?;
    if size > limit {
        return Err(format!("{size} bytes, larger than {limit}"));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    entry
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the archive: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(kind: tar::EntryType, content: &[u8]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        if kind.is_symlink() {
            header.set_link_name("elsewhere").expect("link name");
        }
        header.set_cksum();
        builder
            .append_data(&mut header, "edgecore", content)
            .expect("appended");
        builder.into_inner().expect("archive")
    }

    #[test]
    fn the_file_is_read_within_its_limit() {
        let a = archive(tar::EntryType::Regular, b"\x7fELF binary");
        assert_eq!(first_regular_file(&a, 100), Ok(b"\x7fELF binary".to_vec()));
        let too_big = first_regular_file(&a, 4).expect_err("over the limit");
        assert!(too_big.contains("larger than 4"), "{too_big}");
    }

    #[test]
    fn links_and_empty_archives_are_refused() {
        let link = archive(tar::EntryType::Symlink, b"");
        assert!(first_regular_file(&link, 100).is_err());
        let empty = tar::Builder::new(Vec::new()).into_inner().expect("archive");
        assert!(first_regular_file(&empty, 100).is_err());
    }
}
