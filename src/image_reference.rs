//! Image references as Kyverno's image utilities read them
//! (`pkg/utils/image`, on distribution's `reference.Parse`): Docker Hub is
//! `docker.io` and is added when the first part names no registry (no `.`
//! or `:`, not `localhost`); a reference with neither tag nor digest is
//! tagged `latest`. The `images` variable and JMESPath's `image_normalize`
//! read references so.

use regex::Regex;
use std::sync::LazyLock;

pub const DEFAULT_REGISTRY: &str = "docker.io";

/// The parts of a reference (Kyverno's `ImageInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    pub registry: String,
    pub path: String,
    /// The last part of the path.
    pub name: String,
    /// Empty when the reference has a digest and no tag.
    pub tag: String,
    pub digest: String,
}

impl ImageInfo {
    /// Splits `image` without checking its syntax.
    pub fn split(image: &str) -> ImageInfo {
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, d.to_string()),
            None => (image, String::new()),
        };
        let (registry, remainder) = match rest.split_once('/') {
            Some((first, tail)) if names_registry(first) => (first.to_string(), tail),
            _ => (DEFAULT_REGISTRY.to_string(), rest),
        };
        let (path, tag) = match remainder.rsplit_once(':') {
            Some((p, t)) if !t.contains('/') => (p.to_string(), t.to_string()),
            _ => (remainder.to_string(), String::new()),
        };
        let tag = if tag.is_empty() && digest.is_empty() {
            "latest".to_string()
        } else {
            tag
        };
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        ImageInfo {
            registry,
            path,
            name,
            tag,
            digest,
        }
    }

    /// Parses `image`, refusing what distribution's grammar refuses, with
    /// Kyverno's `GetImageInfo` error.
    pub fn parse(image: &str) -> Result<ImageInfo, String> {
        let info = ImageInfo::split(image);
        let full = if info.registry == DEFAULT_REGISTRY && !image.starts_with("docker.io/") {
            format!("{DEFAULT_REGISTRY}/{image}")
        } else {
            image.to_string()
        };
        check(&full).map_err(|reason| {
            format!(
                "bad image: {full}, defaultRegistry: {DEFAULT_REGISTRY}, \
                 enableDefaultRegistryMutation: true: {reason}"
            )
        })?;
        Ok(info)
    }

    /// `registry/path@digest`, else `registry/path:tag` (Kyverno's
    /// `ImageInfo.String`).
    pub fn reference(&self) -> String {
        let base = format!("{}/{}", self.registry, self.path);
        if self.digest.is_empty() {
            format!("{base}:{}", self.tag)
        } else {
            format!("{base}@{}", self.digest)
        }
    }
}

/// Whether the first part of a reference names a registry.
fn names_registry(first: &str) -> bool {
    first.contains(['.', ':']) || first == "localhost"
}

/// distribution's reference grammar (`reference.ReferenceRegexp`), over a
/// reference whose registry is explicit.
static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    let component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
    let domain_component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    let domain =
        format!(r"(?:{domain_component}(?:\.{domain_component})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?");
    let tag = r"[\w][\w.-]{0,127}";
    let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    Regex::new(&format!(
        r"^{domain}/{component}(?:/{component})*(?::{tag})?(?:@{digest})?$"
    ))
    .expect("the reference grammar compiles")
});

fn check(full: &str) -> Result<(), String> {
    let name = full.split(['@']).next().unwrap_or(full);
    let name = match name.rsplit_once(':') {
        Some((n, tag)) if !tag.contains('/') => n,
        _ => name,
    };
    if name.len() > 255 {
        return Err("repository name must not be more than 255 characters".into());
    }
    if REFERENCE.is_match(full) {
        return Ok(());
    }
    // The grammar with upper case allowed in the path: distribution names
    // that failure apart.
    let path = name.split_once('/').map_or(name, |(_, p)| p);
    if path.chars().any(|c| c.is_ascii_uppercase())
        && REFERENCE.is_match(&full.replacen(path, &path.to_ascii_lowercase(), 1))
    {
        return Err("repository name must be lowercase".into());
    }
    Err("invalid reference format".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_references() {
        for (img, registry, path, tag) in [
            ("nginx", "docker.io", "nginx", "latest"),
            ("nginx:1.2", "docker.io", "nginx", "1.2"),
            ("ghcr.io/org/app:v1", "ghcr.io", "org/app", "v1"),
            ("localhost:5000/app", "localhost:5000", "app", "latest"),
            ("repo/app@sha256:abc", "docker.io", "repo/app", ""),
        ] {
            let i = ImageInfo::split(img);
            assert_eq!(
                (i.registry.as_str(), i.path.as_str(), i.tag.as_str()),
                (registry, path, tag),
                "{img}"
            );
        }
    }

    /// What Kyverno v1.19.1's `image_normalize` gives (`kubectl-kyverno jp
    /// query`).
    #[test]
    fn normalized_as_kyverno_normalizes() {
        let digest = "sha256:0123456789012345678901234567890123456789012345678901234567890123";
        for (img, want) in [
            ("nginx", Ok("docker.io/nginx:latest".to_string())),
            ("a/b/c:1.0", Ok("docker.io/a/b/c:1.0".into())),
            ("my_reg/x:1", Ok("docker.io/my_reg/x:1".into())),
            (
                &format!("localhost:5000/a/b@{digest}"),
                Ok(format!("localhost:5000/a/b@{digest}")),
            ),
            (
                "Nginx",
                Err("bad image: docker.io/Nginx, defaultRegistry: docker.io, \
                     enableDefaultRegistryMutation: true: repository name must be lowercase"
                    .to_string()),
            ),
            (
                "ghcr.io/Foo/bar:1",
                Err("bad image: ghcr.io/Foo/bar:1, defaultRegistry: docker.io, \
                     enableDefaultRegistryMutation: true: repository name must be lowercase"
                    .into()),
            ),
            (
                "nginx:Bad Tag",
                Err(
                    "bad image: docker.io/nginx:Bad Tag, defaultRegistry: docker.io, \
                     enableDefaultRegistryMutation: true: invalid reference format"
                        .into(),
                ),
            ),
            (
                "nginx@sha256:abc",
                Err(
                    "bad image: docker.io/nginx@sha256:abc, defaultRegistry: docker.io, \
                     enableDefaultRegistryMutation: true: invalid reference format"
                        .into(),
                ),
            ),
        ] {
            assert_eq!(ImageInfo::parse(img).map(|i| i.reference()), want, "{img}");
        }
    }
}
