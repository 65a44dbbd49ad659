use super::*;
use serde_json::json;

#[test]
fn scalar_table() {
    for (value, pattern, want) in [
        (json!("nginx:1.2"), json!("nginx:*"), true),
        (json!("nginx:1.2"), json!("!*:latest"), true),
        (json!("nginx:latest"), json!("!*:latest"), false),
        (json!("a"), json!("a | b"), true),
        (json!("c"), json!("a | b"), false),
        (json!(5), json!(">3"), true),
        (json!(5), json!("<3"), false),
        (json!(5), json!(">=5 & <=10"), true),
        (json!(5), json!("1-10"), true),
        (json!(11), json!("1-10"), false),
        (json!(11), json!("1!-10"), true),
        (json!("2Gi"), json!(">1Gi"), true),
        (json!("500Mi"), json!("<=1Gi"), true),
        (json!("90s"), json!("<2m"), true),
        (json!(true), json!(true), true),
        (json!("true"), json!(true), false),
        (json!(80), json!(80), true),
        (json!("80"), json!(80), true),
        (json!(null), json!(null), true),
        (json!(""), json!(null), true),
        (json!(false), json!(null), true),
        (json!({}), json!(null), false),
        (json!(null), json!("*"), false),
        (json!(""), json!("?*"), false),
        (json!("x"), json!("?*"), true),
        (json!(0), json!("0"), true),
        (json!(null), json!(">0"), false),
        (json!(8080), json!("!8080"), false),
        (json!(8081), json!("!8080"), true),
        (
            json!("RuntimeDefault"),
            json!("RuntimeDefault | Localhost"),
            true,
        ),
    ] {
        assert_eq!(scalar(&value, &pattern), want, "{value} vs {pattern}");
    }
}

#[test]
fn anchors_and_structures() {
    let pod = json!({
        "metadata": {"labels": {"app": "web", "team-a": "x"}},
        "spec": {
            "hostNetwork": false,
            "containers": [
                {"name": "a", "image": "nginx:1.0", "securityContext": {"privileged": false}},
                {"name": "b", "image": "busybox:latest"}
            ]
        }
    });
    let kinds = |p: serde_json::Value| validate(&pod, &p).map_err(|e| e.kind);
    assert_eq!(kinds(json!({"spec": {"hostNetwork": false}})), Ok(()));
    assert_eq!(
        kinds(json!({"spec": {"containers": [{"image": "!*:latest"}]}})),
        Err(ErrorKind::Fail)
    );
    assert_eq!(
        kinds(json!({"spec": {"containers": [{"(name)": "a", "image": "nginx:*"}]}})),
        Ok(())
    );
    assert_eq!(
        kinds(json!({"spec": {"containers": [{"(name)": "zzz", "image": "x"}]}})),
        Err(ErrorKind::Skip)
    );
    assert_eq!(
        kinds(json!({"spec": {"containers": [{"=(securityContext)": {"=(privileged)": false}}]}})),
        Ok(())
    );
    assert_eq!(kinds(json!({"spec": {"X(hostPID)": "null"}})), Ok(()));
    assert_eq!(
        kinds(json!({"spec": {"X(hostNetwork)": "null"}})),
        Err(ErrorKind::Negation)
    );
    assert_eq!(
        kinds(json!({"spec": {"^(containers)": [{"name": "b"}]}})),
        Ok(())
    );
    assert_eq!(
        kinds(json!({"spec": {"^(containers)": [{"name": "c"}]}})),
        Err(ErrorKind::Fail)
    );
    assert_eq!(
        kinds(json!({"spec": {"<(hostNetwork)": true, "containers": [{"name": "x"}]}})),
        Err(ErrorKind::Skip)
    );
    assert_eq!(
        kinds(json!({"metadata": {"labels": {"team-*": "?*"}}})),
        Ok(())
    );
    assert_eq!(
        kinds(json!({"metadata": {"labels": {"owner": "?*"}}})),
        Err(ErrorKind::Fail)
    );
    assert_eq!(
        kinds(json!({"spec": {"missing": "*"}})),
        Err(ErrorKind::Fail)
    );
    assert_eq!(kinds(json!({"spec": {"=(missing)": "x"}})), Ok(()));
    assert_eq!(kinds(json!({"spec": []})), Err(ErrorKind::Fail));
    let err = validate(
        &pod,
        &json!({"spec": {"containers": [{"image": "!*:latest"}]}}),
    )
    .unwrap_err();
    assert_eq!(err.path, "/spec/containers/1/image/");
}

#[test]
fn anchor_parsing() {
    assert_eq!(parse_anchor("(name)"), Some((Anchor::Condition, "name")));
    assert_eq!(parse_anchor("=(name)"), Some((Anchor::Equality, "name")));
    assert_eq!(
        parse_anchor("X(hostPID)"),
        Some((Anchor::Negation, "hostPID"))
    );
    assert_eq!(parse_anchor("^(items)"), Some((Anchor::Existence, "items")));
    assert_eq!(parse_anchor("<(a)"), Some((Anchor::Global, "a")));
    assert_eq!(parse_anchor("+(a)"), Some((Anchor::AddIfNotPresent, "a")));
    assert_eq!(parse_anchor("!(a)"), None);
    assert_eq!(parse_anchor("name"), None);
}

#[test]
fn paths_render_root_first() {
    assert_eq!(Path::ROOT.render(), "/");
    let spec = Path::ROOT.key("spec");
    let list = spec.key("containers");
    let item = list.index(12);
    assert_eq!(item.key("image").render(), "/spec/containers/12/image/");
    assert_eq!(list.index(1234).render(), "/spec/containers/1234/");
}

#[test]
fn deep_paths_render_like_shallow_ones() {
    // Paths of every depth up to beyond the render buffer, where the
    // recursive fallback takes over.
    fn descend(path: &Path, depth: usize, want: &str) {
        assert_eq!(path.render(), want, "depth {depth}");
        if depth == Path::RENDER_DEPTH + 3 {
            return;
        }
        let index = depth * 7;
        let list = path.key("items");
        descend(
            &list.index(index),
            depth + 1,
            &format!("{want}items/{index}/"),
        );
    }
    descend(&Path::ROOT, 0, "/");
}
