//! Kyverno's CEL image library: `image(ref)`, `isImage(ref)` and the
//! methods of an image (`registry()`, `repository()`, `identifier()`,
//! `tag()`, `digest()`, `containsDigest()`). References are parsed the way
//! go-containerregistry's `name.ParseReference` does: Docker Hub is
//! `index.docker.io` and its one-part repositories are under `library/`.

const DEFAULT_REGISTRY: &str = "index.docker.io";

/// A parsed image reference: the fields an image value carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    pub image: String,
    pub registry: String,
    pub repository: String,
    /// The tag when there is no digest (default `latest`), else empty.
    pub tag: String,
    pub digest: String,
}

impl ImageRef {
    /// The tag, or the digest when there is one.
    pub fn identifier(&self) -> &str {
        if self.digest.is_empty() {
            &self.tag
        } else {
            &self.digest
        }
    }
}

fn chars_ok(s: &str, allowed: impl Fn(char) -> bool, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.chars().all(allowed)
}

fn parse_repository(name: &str) -> Result<(String, String), String> {
    if name.is_empty() {
        return Err("a repository name must be specified".into());
    }
    let (registry, repo) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first, rest),
        _ => (DEFAULT_REGISTRY, name),
    };
    let repo_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-./".contains(c);
    if !chars_ok(repo, repo_char, 2, 255) {
        return Err(format!(
            "repository can only contain the characters `abcdefghijklmnopqrstuvwxyz0123456789_-./`: {repo}"
        ));
    }
    let registry = if registry == "docker.io" {
        DEFAULT_REGISTRY
    } else {
        registry
    };
    let repository = if registry == DEFAULT_REGISTRY && !repo.contains('/') {
        format!("library/{repo}")
    } else {
        repo.to_string()
    };
    Ok((registry.to_string(), repository))
}

/// `name.NewTag`: `repo[:tag]`.
fn parse_tag(name: &str) -> Result<ImageRef, String> {
    let (base, tag) = match name.rsplit_once(':') {
        Some((base, tag)) if !tag.contains('/') => (base, tag),
        _ => (name, ""),
    };
    let tag_char = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
    if !tag.is_empty() && !chars_ok(tag, tag_char, 1, 128) {
        return Err(format!("invalid tag {tag:?}"));
    }
    let (registry, repository) = parse_repository(base)?;
    Ok(ImageRef {
        image: name.to_string(),
        registry,
        repository,
        tag: if tag.is_empty() { "latest" } else { tag }.to_string(),
        digest: String::new(),
    })
}

/// `name.NewDigest`: `repo[:tag]@sha256:<64 hex>`; a tag is dropped.
fn parse_digest(name: &str) -> Result<ImageRef, String> {
    let Some((base, digest)) = name.split_once('@') else {
        return Err("a digest must contain exactly one '@' separator".into());
    };
    let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    let valid = digest
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.chars().all(hex));
    if !valid {
        return Err(format!("invalid digest {digest:?}"));
    }
    let (registry, repository) = match parse_tag(base) {
        Ok(t) => (t.registry, t.repository),
        Err(_) => parse_repository(base)?,
    };
    Ok(ImageRef {
        image: name.to_string(),
        registry,
        repository,
        tag: String::new(),
        digest: digest.to_string(),
    })
}

/// `name.ParseReference`: a tag reference, else a digest reference.
pub fn parse(reference: &str) -> Result<ImageRef, String> {
    parse_tag(reference)
        .or_else(|_| parse_digest(reference))
        .map_err(|_| format!("could not parse reference: {reference}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2";

    #[test]
    fn references_parse_like_go_containerregistry() {
        let r = parse("registry.k8s.io/kube-apiserver-arm64:testtag").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.identifier()),
            ("registry.k8s.io", "kube-apiserver-arm64", "testtag")
        );
        let r = parse("nginx").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_str()),
            ("index.docker.io", "library/nginx", "latest")
        );
        assert_eq!(
            parse("docker.io/bitnami/redis").unwrap().registry,
            "index.docker.io"
        );
        assert_eq!(
            parse("localhost:5000/app:1").unwrap().registry,
            "localhost:5000"
        );
        let r = parse(&format!("corp.reg.com/app:1.0@{DIGEST}")).unwrap();
        assert_eq!((r.tag.as_str(), r.identifier()), ("", DIGEST));
        assert_eq!(r.repository, "app");
    }

    #[test]
    fn invalid_references_are_errors() {
        assert!(parse("registry.k8s.io/kube-apiserver-arm64:@").is_err());
        assert!(parse("Upper/Case").is_err());
        assert!(parse("app@sha256:abc").is_err());
        assert!(parse("").is_err());
    }
}
