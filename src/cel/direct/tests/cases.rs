//! The test tables, one expression per line.

/// (expression, answer, answered by the direct evaluator itself)
pub(super) const INTERPRETER_CASES: &[(&str, &str, bool)] = &[
    ("object.spec.hostNetwork == false", "true", true),
    (
        "has(object.spec.volumes) && size(object.spec.volumes) == 1",
        "true",
        true,
    ),
    (
        "object.spec.containers.all(c, c.image.startsWith('nginx'))",
        "false",
        true,
    ),
    (
        "object.spec.containers.exists(c, c.image.endsWith(':latest'))",
        "true",
        true,
    ),
    (
        "object.spec.containers.exists_one(c, c.name == 'a')",
        "true",
        true,
    ),
    (
        "object.spec.containers.map(c, c.name)",
        r#"["a","b"]"#,
        true,
    ),
    (
        "object.spec.containers.filter(c, c.name != 'a').map(c, c.image)",
        r#"["ghcr.io/x/b:latest"]"#,
        true,
    ),
    (
        "object.spec.containers.map(c, c.name).join(',')",
        r#""a,b""#,
        true,
    ),
    (
        "object.metadata.labels.all(k, k in ['app', 'tier'])",
        "true",
        true,
    ),
    ("'app' in object.metadata.labels", "true", true),
    // Kyverno's image library.
    (
        "object.spec.containers.map(c, image(c.image).registry())",
        r#"["index.docker.io","ghcr.io"]"#,
        true,
    ),
    (
        "image('nginx').repository() + ':' + image('nginx').identifier()",
        r#""library/nginx:latest""#,
        true,
    ),
    (
        "image('ghcr.io/x/b@sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2').containsDigest()",
        "true",
        true,
    ),
    ("image('nginx:1.2').containsDigest()", "false", true),
    ("isImage('UPPER/case') || isImage('nginx')", "true", true),
    // An invalid reference: the interpreter words the error.
    (
        "image('UPPER/case').registry()",
        "error: image: could not parse reference: UPPER/case",
        false,
    ),
    (
        "object.spec.containers[0].?securityContext.?capabilities.?add.orValue([])",
        r#"["NET_ADMIN"]"#,
        true,
    ),
    (
        "object.spec.containers[1].?securityContext.?capabilities.?add.orValue([]).size()",
        "0",
        true,
    ),
    ("object.spec.?initContainers.hasValue()", "false", true),
    // An index's key is evaluated, and fails, past a missing step
    // (the `cel` fuzz target's find: the direct evaluator answered none).
    ("object.?missing.x['a' - 'b']", "", false),
    ("object.?missing.x['a' + 'b'].hasValue()", "false", true),
    (
        "object.spec.containers + object.spec.?initContainers.orValue([])",
        "",
        true,
    ),
    (
        "object.spec.volumes.all(v, !has(v.hostPath) || !v.hostPath.path.matches('^/etc'))",
        "false",
        true,
    ),
    (
        "object.spec.containers.all(c, c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0))",
        "false",
        true,
    ),
    (
        "cel.bind(n, object.metadata.name, n + '-' + n)",
        r#""web-web""#,
        true,
    ),
    ("[1, 2, 3].map(x, x * 2).filter(x, x > 2)", "[4,6]", true),
    (
        "{'a': 1, 'b': object.metadata.name}",
        r#"{"a":1,"b":"web"}"#,
        true,
    ),
    ("type(object.metadata.name) == string", "true", true),
    (
        "string(size(object.spec.containers)) + ' containers'",
        r#""2 containers""#,
        true,
    ),
    ("'a,b,,c'.split(',')", r#"["a","b","","c"]"#, true),
    ("object.metadata.name.indexOf('b')", "2", true),
    ("int('42') + 1", "43", true),
    ("-(1) - 2 * 3 % 4 / 1", "-3", true),
    // Selection chains and has() on them, walked as one path node.
    (
        "has(object.spec.containers) && !has(object.spec.initContainers)",
        "true",
        true,
    ),
    (
        "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.capabilities) || c.securityContext.capabilities.add[0] == 'NET_ADMIN')",
        "true",
        true,
    ),
    ("has(object.metadata.labels.app)", "true", true),
    // cel-go: has() of a string's field is false.
    ("has(object.metadata.name.first)", "false", true),
    ("has(object.spec.nope.deeper)", "", false),
    ("object.spec.volumes[0].hostPath.path", r#""/etc""#, true),
    // Comparisons with a constant on either side, and `in` a constant.
    ("'web' == object.metadata.name", "true", true),
    ("object.metadata.name != 'web'", "false", true),
    (
        "null == object.spec.containers[1].securityContext",
        "true",
        true,
    ),
    ("object.metadata.labels.tier in ['a', 'b']", "true", true),
    // What a decoded document must serve as a `Value` does: indexing,
    // sizes, key order, equality and concatenation.
    ("object.spec.containers[1].name", r#""b""#, true),
    (
        "size(object.spec.containers) + size(object.metadata.labels)",
        "4",
        true,
    ),
    // (Not `map()` over a map: the interpreter's maps are hashed, so
    // the order of its answer varies.)
    (
        "object.metadata.labels.exists_one(k, k == 'app')",
        "true",
        true,
    ),
    ("object.metadata.labels.all(k, k != '')", "true", true),
    (
        "object.metadata.labels == {'tier': 'a', 'app': 'x'}",
        "true",
        true,
    ),
    (
        "object.spec.containers[0].ports == [{'hostPort': 80}]",
        "true",
        true,
    ),
    (
        "'app' in object.metadata.labels && !(1 in object.metadata.labels)",
        "true",
        true,
    ),
    (
        "(object.spec.containers + object.spec.volumes).map(x, x.name)",
        r#"["a","b","v"]"#,
        true,
    ),
    (
        "object.spec.volumes[0].hostPath",
        r#"{"path":"/etc"}"#,
        true,
    ),
    ("object.metadata.name in {'web': 1}", "true", true),
    ("[1, 2] == [1.0, 2u]", "true", true),
    // Errors and edge cases go to the interpreter, which words them.
    ("object.spec.nope", "", false),
    ("object.spec.containers[5]", "", false),
    ("1 / 0", "", false),
    ("9223372036854775807 + 1", "", false),
    ("1 == 1.0", "true", true),
    ("[1u] == [1.0] && 2 != 2u", "false", true),
    ("1.0 in [1] && 1u in {1: 2}", "true", true),
    // A double key finds the integer key it equals, as in cel-go.
    ("!(1.5 in {1: 2}) && 1.0 in {1: 2}", "true", true),
    (
        "object.spec.containers.all(c, c.securityContext.capabilities.add.size() > 0)",
        "",
        false,
    ),
    (
        "timestamp('2024-01-01T00:00:00Z') < timestamp('2025-01-01T00:00:00Z')",
        "true",
        true,
    ),
    // Timestamps and durations: conversions, arithmetic, order.
    (
        "timestamp('2024-01-01T00:00:00Z') + duration('24h') == timestamp('2024-01-02T00:00:00Z')",
        "true",
        true,
    ),
    (
        "string(timestamp('2024-01-01T10:00:00+01:00') - duration('90m'))",
        "\"2024-01-01T08:30:00+01:00\"",
        true,
    ),
    (
        "timestamp('2024-01-02T00:00:00Z') - timestamp('2024-01-01T00:00:00Z') == duration('24h')",
        "true",
        true,
    ),
    (
        "duration('1h30m') > duration('90m') || int(timestamp('1970-01-01T00:01:00Z')) == 60",
        "true",
        true,
    ),
    ("timestamp('2024-13-01T00:00:00Z')", "", false),
    (
        "timestamp('2024-01-01T00:00:00Z').getFullYear()",
        "2024",
        false,
    ),
    // A repeated key keeps its last value.
    (
        "{'a': 1, 'b': 2, 'a': 3}['a'] + size({'a': 1, 'a': 2})",
        "4",
        true,
    ),
    // The two-variable macros: a list's indexes and items, a map's
    // keys and values.
    (
        "object.spec.containers.all(i, c, i < 2 && c.name != '')",
        "true",
        true,
    ),
    (
        "object.metadata.labels.exists(k, v, k == 'tier' && v == 'a')",
        "true",
        true,
    ),
    (
        "object.spec.containers.existsOne(i, c, c.image.startsWith('nginx'))",
        "true",
        true,
    ),
    (
        "object.spec.containers.transformList(i, c, i > 0, c.name + string(i))",
        r#"["b1"]"#,
        true,
    ),
    (
        "object.metadata.labels.transformMap(k, v, k != 'app', v + 'x')",
        r#"{"tier":"ax"}"#,
        true,
    ),
    (
        "object.spec.containers.all(i, c, c.ports.all(j, p, p.hostPort > i + j))",
        "",
        false,
    ),
];

/// (expression, answer, a node its plan must hold, answered directly)
pub(super) const CHAIN_CASES: &[(&str, &str, &str, bool)] = &[
    // From a comprehension's item: the first container's add list, the
    // second's securityContext null (none past it).
    (
        "object.spec.containers.map(c, c.?securityContext.?capabilities.?add.orValue([]).size())",
        "[1,0]",
        "OptFields",
        true,
    ),
    (
        "object.spec.containers.all(c, c.?securityContext.?runAsUser.orValue(0) == 0)",
        "true",
        "OptFields",
        true,
    ),
    (
        "object.spec.containers.exists(c, c.?securityContext.?capabilities.?add.orValue(['x']) == ['x'])",
        "true",
        "OptFields",
        true,
    ),
    (
        "object.spec.containers.all(c, ['NET_ADMIN'] == c.?securityContext.?capabilities.?add.orValue([]))",
        "false",
        "OptFields",
        true,
    ),
    // From a root.
    (
        "object.spec.?hostNetwork.orValue(true) == false",
        "true",
        "OptFields",
        true,
    ),
    (
        "object.?spec.?hostIPC.orValue(false)",
        "false",
        "OptFields",
        true,
    ),
    ("object.spec.?volumes.hasValue()", "true", "OptFields", true),
    // `has(p.f) ? p.f : constant` is the chain `p.?f.orValue(constant)`:
    // a present field (null or not), an absent one, and a `p` that is
    // no map (the interpreter's error).
    (
        "has(object.spec.volumes) ? object.spec.volumes : []",
        r#"[{"hostPath":{"path":"/etc"},"name":"v"}]"#,
        "OptFields",
        true,
    ),
    (
        "has(object.spec.initContainers) ? object.spec.initContainers : []",
        "[]",
        "OptFields",
        true,
    ),
    (
        "has(object.spec.containers[1].securityContext) ? object.spec.containers[1].securityContext : 'none'",
        "null",
        "OptFields",
        true,
    ),
    (
        "has(object.spec.containers.name) ? object.spec.containers.name : 'x'",
        "error: unsupported index type 'string' in list",
        "OptFields",
        false,
    ),
    // Another field, or a default that is not constant: as written.
    (
        "has(object.spec.volumes) ? object.spec.hostNetwork : true",
        "false",
        "Cond",
        true,
    ),
    (
        "has(object.spec.hostPID) ? object.spec.hostPID : object.spec.hostNetwork",
        "false",
        "Cond",
        true,
    ),
    // A list's field on the way: the interpreter's answer.
    (
        "object.spec.?containers.?name.orValue('x') == 'x'",
        "error: unsupported index type 'string' in list",
        "OptFields",
        false,
    ),
    // A chain's first step shared with other selections of the same
    // path: found by whichever comes first and kept, then read from
    // there; a null there (the second container) is walked again.
    (
        "object.spec.containers.map(c, [c.?securityContext.?capabilities.?add.orValue([]).size(), \
         c.?securityContext.?runAsUser.orValue(-1)])",
        "[[1,-1],[0,-1]]",
        "MemoOptFields",
        true,
    ),
    (
        "object.spec.containers.all(c, !has(c.securityContext) || \
         c.?securityContext.?capabilities.?add.orValue([]) == ['NET_ADMIN'])",
        "false",
        "MemoOptFields",
        true,
    ),
    (
        "object.spec.containers.exists(c, c.?securityContext.?privileged.orValue(false) == false && \
         has(c.securityContext) && has(c.securityContext.capabilities))",
        "true",
        "MemoOptFields",
        true,
    ),
    (
        "object.?spec.?hostIPC.orValue(false) == false && object.spec.hostNetwork == false",
        "true",
        "MemoOptFields",
        true,
    ),
    // The first step finds a list, whose field is the interpreter's.
    (
        "size(object.spec.containers) > 0 && object.?spec.?containers.?name.orValue('x') == 'x'",
        "error: unsupported index type 'string' in list",
        "MemoOptFields",
        false,
    ),
    // Three or more operands: the first that decides, decides, over
    // errors on either side; else the error stands.
    (
        "object.spec.hostNetwork || object.spec.containers[5].name == 'x' || true",
        "true",
        "Any",
        true,
    ),
    (
        "false || object.spec.missing.x == 1 || false",
        "error: no such key: missing",
        "Any",
        false,
    ),
    (
        "object.spec.missing.x == 1 && false && true",
        "false",
        "All",
        true,
    ),
    (
        "has(object.spec) && has(object.spec.containers) && size(object.spec.containers) == 2",
        "true",
        "All",
        true,
    ),
    (
        "(false || false) || (false || object.spec.hostNetwork == false)",
        "true",
        "Any",
        true,
    ),
    // The guards of the Pod Security checks: the second container's
    // securityContext is there (null), its fields are not.
    (
        "object.spec.containers.all(c, !has(c.securityContext) || \
         !has(c.securityContext.capabilities) || \
         !has(c.securityContext.capabilities.add) || \
         size(c.securityContext.capabilities.add) == 1)",
        "true",
        "Any",
        true,
    ),
];
