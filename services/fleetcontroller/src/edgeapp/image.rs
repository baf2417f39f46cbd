//! Image references as KubeEdge's image overrider reads them: `[registry/]repository[:tag]`
//! or `[registry/]repository@digest`, split without normalisation (no implied `docker.io` or
//! `library/`), and the [`ImageOverrider`](crate::api::edgeapp::ImageOverrider) edits of each
//! component.

use crate::api::edgeapp::{ImageComponent, Operator};

/// A parsed image reference. The registry is the text before the first `/` when it names a
/// host (contains `.` or `:`, or is `localhost`); a reference with both a tag and a digest
/// keeps the tag only, as KubeEdge does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host, possibly with a port; empty when the reference names none.
    pub registry: String,
    /// Repository path.
    pub repository: String,
    /// Tag, when there is one.
    pub tag: Option<String>,
    /// Digest (`algorithm:hex`), when there is one and no tag.
    pub digest: Option<String>,
}

/// Why an image reference cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Empty, or with whitespace or control characters.
    #[error("image reference {0:?} is empty or contains whitespace")]
    Blank(String),
    /// No repository, or a repository or tag with characters an image name cannot hold.
    #[error("image reference {0:?} is not [registry/]repository[:tag|@digest]")]
    Malformed(String),
}

impl ImageRef {
    /// Parses `image`.
    ///
    /// # Errors
    /// [`ImageError`] for an empty reference, one with whitespace, or one without a valid
    /// repository, tag or digest.
    pub fn parse(image: &str) -> Result<Self, ImageError> {
        if image.is_empty() || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ImageError::Blank(image.to_owned()));
        }
        let malformed = || ImageError::Malformed(image.to_owned());
        let (name, digest) = match image.split_once('@') {
            Some((name, digest)) if is_digest(digest) => (name, Some(digest.to_owned())),
            Some(_) => return Err(malformed()),
            None => (image, None),
        };
        let (registry, rest) = match name.split_once('/') {
            Some((host, rest)) if host.contains(['.', ':']) || host == "localhost" => {
                (host.to_owned(), rest)
            }
            _ => (String::new(), name),
        };
        // A tag follows the last ':' after the last '/'.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&rest[..at], Some(rest[at + 1..].to_owned()))
            }
            None => (rest, None),
        };
        if !is_repository(repository)
            || tag.as_deref().is_some_and(|t| !is_tag(t))
            || (!registry.is_empty() && !is_registry(&registry))
        {
            return Err(malformed());
        }
        let digest = if tag.is_some() { None } else { digest };
        Ok(Self {
            registry,
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// Applies one edit of `component` (KubeEdge's semantics): `Registry` and `Repository`
    /// append `value` (add), take it (replace) or become empty (remove); `Tag` appends to or
    /// replaces the tag (or, without one, the digest), and the result becomes the tag when it
    /// is a valid tag, else the digest when it is a valid digest, else the edit is ignored;
    /// removing a tag drops the tag, or else the digest.
    pub fn edit(&mut self, component: ImageComponent, operator: Operator, value: &str) {
        match (component, operator) {
            (ImageComponent::Registry, Operator::Add) => self.registry.push_str(value),
            (ImageComponent::Registry, Operator::Replace) => value.clone_into(&mut self.registry),
            (ImageComponent::Registry, Operator::Remove) => self.registry.clear(),
            (ImageComponent::Repository, Operator::Add) => self.repository.push_str(value),
            (ImageComponent::Repository, Operator::Replace) => {
                value.clone_into(&mut self.repository);
            }
            (ImageComponent::Repository, Operator::Remove) => self.repository.clear(),
            (ImageComponent::Tag, Operator::Remove) => {
                if self.tag.take().is_none() {
                    self.digest = None;
                }
            }
            (ImageComponent::Tag, operator) => {
                let new = if operator == Operator::Add {
                    let current = self.tag.as_deref().or(self.digest.as_deref());
                    format!("{}{value}", current.unwrap_or_default())
                } else {
                    value.to_owned()
                };
                if is_tag(&new) {
                    (self.tag, self.digest) = (Some(new), None);
                } else if is_digest(&new) {
                    (self.tag, self.digest) = (None, Some(new));
                }
            }
        }
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.registry.is_empty() {
            write!(f, "{}/", self.registry)?;
        }
        f.write_str(&self.repository)?;
        match (&self.tag, &self.digest) {
            (Some(tag), _) => write!(f, ":{tag}"),
            (None, Some(digest)) => write!(f, "@{digest}"),
            (None, None) => Ok(()),
        }
    }
}

/// A tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
pub fn is_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && tag.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A digest: `<algorithm>:<at least 32 hex digits>`, the algorithm of lowercase letters,
/// digits and `+._-`.
pub fn is_digest(digest: &str) -> bool {
    digest.split_once(':').is_some_and(|(algorithm, hex)| {
        !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+._-".contains(c))
            && hex.len() >= 32
            && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

/// A registry: a host name (letters, digits, `.`, `-`) with an optional numeric port.
fn is_registry(registry: &str) -> bool {
    let (host, port) = registry.split_once(':').unwrap_or((registry, "1"));
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        && !port.is_empty()
        && port.len() <= 5
        && port.chars().all(|c| c.is_ascii_digit())
}

/// A repository: `/`-separated components of lowercase letters, digits and `._-`.
fn is_repository(repository: &str) -> bool {
    !repository.is_empty()
        && repository.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edited(image: &str, component: ImageComponent, operator: Operator, value: &str) -> String {
        let mut image = ImageRef::parse(image).expect("a valid reference");
        image.edit(component, operator, value);
        image.to_string()
    }

    #[test]
    fn components_are_split_without_normalisation() {
        let image = ImageRef::parse("localhost:5000/team/app:1.2").expect("a valid reference");
        assert_eq!(
            (
                image.registry.as_str(),
                image.repository.as_str(),
                image.tag.as_deref()
            ),
            ("localhost:5000", "team/app", Some("1.2"))
        );
        let image = ImageRef::parse("library/nginx").expect("a valid reference");
        assert_eq!((image.registry.as_str(), image.tag), ("", None));
        let digest = format!("sha256:{}", "a".repeat(64));
        let image = ImageRef::parse(&format!("nginx@{digest}")).expect("a valid reference");
        assert_eq!(image.digest.as_deref(), Some(digest.as_str()));
        // With both, the tag is kept.
        let image = ImageRef::parse(&format!("nginx:1@{digest}")).expect("a valid reference");
        assert_eq!((image.tag.as_deref(), image.digest), (Some("1"), None));
    }

    #[test]
    fn kubeedge_examples_hold() {
        use ImageComponent::{Registry, Repository, Tag};
        use Operator::{Add, Remove, Replace};
        assert_eq!(
            edited("nginx:1.14.2", Tag, Replace, "latest"),
            "nginx:latest"
        );
        assert_eq!(
            edited(
                "docker.io/library/nginx:1.14.2",
                Registry,
                Replace,
                "test-registry.com"
            ),
            "test-registry.com/library/nginx:1.14.2"
        );
        assert_eq!(
            edited("nginx:1.14.2", Repository, Add, "-custom"),
            "nginx-custom:1.14.2"
        );
        assert_eq!(edited("nginx:1.14.2", Tag, Remove, ""), "nginx");
        assert_eq!(
            edited("nginx:latest", Registry, Replace, "hz.io"),
            "hz.io/nginx:latest"
        );
        assert_eq!(edited("hz.io/nginx", Registry, Remove, ""), "nginx");
        assert_eq!(edited("nginx:1", Tag, Add, ".2"), "nginx:1.2");
        // Neither a tag nor a digest: ignored.
        assert_eq!(edited("nginx:1", Tag, Replace, "no/way"), "nginx:1");
        let digest = format!("sha256:{}", "b".repeat(64));
        assert_eq!(
            edited("nginx:1", Tag, Replace, &digest),
            format!("nginx@{digest}")
        );
    }

    #[test]
    fn bad_references_are_refused() {
        for bad in [
            "",
            "a b",
            "Nginx",
            "nginx:",
            "nginx:bad/tag",
            "nginx@sha256:xyz",
            "/x",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?}");
        }
    }
}
