use super::*;
use crate::context::NoResolver;
use crate::policy::cel_policy::{CelCompileError, ValidatingPolicyDoc};

fn compile(mode: &str, extra: &str, validations: &[&str]) -> CompiledValidatingPolicy {
    try_compile(mode, extra, validations).unwrap()
}

fn try_compile(
    mode: &str,
    extra: &str,
    validations: &[&str],
) -> Result<CompiledValidatingPolicy, CelCompileError> {
    let validations: String = validations
        .iter()
        .map(|v| format!("  - expression: {}\n", serde_json::to_string(v).unwrap()))
        .collect();
    let yaml = format!(
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {{name: p}}\n\
         spec:\n  evaluation: {{mode: {mode}}}\n{extra}  validations:\n{validations}"
    );
    let doc: ValidatingPolicyDoc = serde_saphyr::from_str(&yaml).unwrap();
    CompiledValidatingPolicy::compile(&doc)
}

fn run(policy: &CompiledValidatingPolicy, request: &Value) -> (RuleStatus, String) {
    let response = evaluate_authorization_policy(policy, request, &NoResolver);
    let [rule] = &response.rules[..] else {
        panic!("one rule expected: {:?}", response.rules);
    };
    assert_eq!(rule.name, "p");
    (rule.status, rule.message.to_string())
}

fn http(payload: Value) -> Value {
    http_request(&payload).unwrap()
}

fn envoy(payload: Value) -> Value {
    envoy_request(&payload).unwrap()
}

const ADMIN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6ImFkbWluIiwic3ViIjoiWVd4cFkyVT0ifQ.veMeVDYlulTdieeX-jxFZ_tCmqQ_K8rwx2OktUHv5Z0";
const GUEST: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6Imd1ZXN0Iiwic3ViIjoiWVd4cFkyVT0ifQ.ja1bgvIt47393ba_WbSBm35NrUhdxM4mOVQN8iXz8lk";

/// Kyverno's `test/cli/test-validating-policy/{http,envoy}-{allow,deny}`.
#[test]
fn allowed_passes_and_denied_fails_with_kyvernos_words() {
    let request = http(json!({"attributes": {"method": "GET", "path": "/x"}}));
    let envoy_request = envoy(json!({"attributes": {"request": {"http": {"method": "GET"}}}}));
    for (mode, validation, request, want) in [
        (
            "HTTP",
            "http.Allowed().Response()",
            &request,
            (RuleStatus::Pass, "request allowed"),
        ),
        (
            "HTTP",
            "http.Denied(\"not allowed\").Response()",
            &request,
            (RuleStatus::Fail, "request denied, reason: not allowed"),
        ),
        (
            "Envoy",
            "envoy.Allowed().Response()",
            &envoy_request,
            (RuleStatus::Pass, "request allowed"),
        ),
        (
            "Envoy",
            "envoy.Denied(403).WithBody(\"Unauthorized Request\").Response()",
            &envoy_request,
            (RuleStatus::Fail, "request denied with status code 403"),
        ),
    ] {
        let (status, message) = run(&compile(mode, "", &[validation]), request);
        assert_eq!((status, message.as_str()), want, "{validation}");
    }
}

/// Kyverno's `envoy-jwt`: the first validation that answers decides; a
/// null answer goes on to the next.
#[test]
fn validations_answer_in_order_with_jwt_claims() {
    let policy = compile(
        "Envoy",
        "  variables:\n  - name: authorization\n    expression: \
         object.attributes.request.http.headers[?\"authorization\"].orValue(\"\").split(\" \")\n  \
         - name: token\n    expression: 'size(variables.authorization) == 2 && \
         variables.authorization[0].lowerAscii() == \"bearer\" ? \
         jwt.Decode(variables.authorization[1], \"secret\") : null'\n",
        &[
            "variables.token == null || !variables.token.Valid ? envoy.Denied(401).Response() : null",
            "variables.token.Claims.?role.orValue(\"\") != \"admin\" ? envoy.Denied(403).Response() : null",
            "envoy.Allowed().Response()",
        ],
    );
    let with = |authorization: &str| {
        envoy(json!({"attributes": {"request": {"http": {"headers": {
            "authorization": authorization}}}}}))
    };
    for (authorization, want) in [
        (
            "empty",
            (RuleStatus::Fail, "request denied with status code 401"),
        ),
        (
            &format!("bearer {GUEST}"),
            (RuleStatus::Fail, "request denied with status code 403"),
        ),
        (
            &format!("Bearer {ADMIN}"),
            (RuleStatus::Pass, "request allowed"),
        ),
    ] {
        let (status, message) = run(&policy, &with(authorization));
        assert_eq!((status, message.as_str()), want, "{authorization}");
    }
    // A token signed with another key: jwt.Decode's error is the rule's.
    let (status, message) = run(&policy, &with(&format!("bearer {ADMIN}x")));
    assert_eq!(status, RuleStatus::Error);
    assert!(message.contains("failed to verify token"), "{message}");
}

#[test]
fn envoy_responses_carry_headers_and_messages() {
    let policy = compile(
        "Envoy",
        "",
        &[
            "envoy.Allowed().WithHeader(\"x-user\", \"alice\").WithHeader(envoy.Header(\"x-a\", \
           \"b\").KeepEmptyValue()).WithoutHeader(\"cookie\").WithResponseHeader(\"r\", \
           \"v\").WithQueryParam(\"q\", \"1\").WithoutQueryParam(\"debug\").Response()\
           .WithMessage(\"ok\").WithMetadata({\"k\": \"v\"})",
        ],
    );
    let request = envoy(json!({}));
    assert_eq!(run(&policy, &request).0, RuleStatus::Pass);
    let cache = InterpreterCache::default();
    let vars = bind_request(
        &cache,
        JsonRef::Value(&request),
        JsonRef::Value(&NULL),
        &NoRequest,
    );
    let answer = policy.checks.validations[0]
        .program
        .eval(&vars, &crate::cel::NoLookups)
        .unwrap();
    let answer = cel_to_json(&answer).unwrap();
    let ok = &answer["ok_response"];
    assert_eq!(ok["headers"][0]["header"]["key"], "x-user");
    assert_eq!(ok["headers"][1]["keep_empty_value"], true);
    assert_eq!(ok["headers_to_remove"], json!(["cookie"]));
    assert_eq!(ok["response_headers_to_add"][0]["header"]["value"], "v");
    assert_eq!(
        ok["query_parameters_to_set"][0],
        json!({"key": "q", "value": "1"})
    );
    assert_eq!(ok["query_parameters_to_remove"], json!(["debug"]));
    assert_eq!(
        answer["status"],
        json!({"code": 0, "message": "ok", "details": []})
    );
    assert_eq!(answer["dynamic_metadata"], json!({"k": "v"}));
}

#[test]
fn http_requests_read_headers_and_query_as_go_does() {
    let policy = compile(
        "HTTP",
        "",
        &["object.attributes.Header(\"x-user\") == [\"alice\"] && \
           object.attributes.QueryParam(\"v\") == [\"1\", \"2\"] && \
           object.attributes.QueryParam(\"none\") == [] && object.attributes.body == \"hi\" && \
           object.attributes.contentLength == 2 && object.attributes.fragment == \"\" \
           ? http.Allowed().Response() : http.Denied(\"who\").Response()"],
    );
    // Field names as encoding/json matches them: any case.
    let request = http(json!({"Attributes": {
        "Header": {"X-User": ["alice"]}, "query": {"v": ["1", "2"]},
        "body": "aGk=", "contentLength": 2,
    }}));
    assert_eq!(
        run(&policy, &request),
        (RuleStatus::Pass, "request allowed".into())
    );
    let other = http(json!({"attributes": {"header": {"X-User": ["bob"]}}}));
    assert_eq!(
        run(&policy, &other),
        (RuleStatus::Fail, "request denied, reason: who".into())
    );
    for (payload, want) in [
        (
            json!({"attributes": {"method": 1}}),
            "into Go struct field CheckRequestAttributes.attributes.method of type string",
        ),
        (
            json!({"attributes": {"header": {"a": "b"}}}),
            "of type []string",
        ),
        (json!({"attributes": {"body": "%%"}}), "illegal base64"),
        (
            json!([]),
            "cannot unmarshal array into Go value of type CheckRequest",
        ),
    ] {
        let e = http_request(&payload).unwrap_err();
        assert!(e.contains(want), "{payload}: {e}");
    }
}

#[test]
fn envoy_requests_read_as_protojson_reads_them() {
    let request = envoy(json!({"attributes": {
        "contextExtensions": {"a": "b"},
        "request": {"http": {"size": "12", "rawBody": "aGk=", "header_map": {"headers": [{"key": "k"}]}}},
        "source": {"address": {"socketAddress": {"protocol": "UDP", "portValue": 443}}},
    }}));
    let a = &request["attributes"];
    assert_eq!(a["context_extensions"], json!({"a": "b"}));
    assert_eq!(a["request"]["http"]["size"], 12);
    assert_eq!(a["request"]["http"]["raw_body"], "hi");
    assert_eq!(a["request"]["http"]["method"], "");
    assert_eq!(a["request"]["http"]["headers"], json!({}));
    assert_eq!(
        a["request"]["http"]["header_map"]["headers"][0]["value"],
        ""
    );
    assert_eq!(a["source"]["address"]["socket_address"]["protocol"], 1);
    assert_eq!(a["source"]["address"]["socket_address"]["port_value"], 443);
    assert_eq!(a["destination"]["principal"], "");
    assert!(a["request"].get("time").is_none());
    for (payload, want) in [
        (
            json!({"attributes": {"bogus": 1}}),
            "unknown field \"bogus\"",
        ),
        (
            json!({"attributes": {"request": {"http": {"size": "x"}}}}),
            "CheckRequest.attributes.request.http.size: invalid value",
        ),
        (
            json!({"attributes": {"request": {"http": {"headers": {"a": 1}}}}}),
            "invalid value",
        ),
        (json!({"attributes": 3}), "an object is expected"),
    ] {
        let e = envoy_request(&payload).unwrap_err();
        assert!(e.contains(want), "{payload}: {e}");
    }
}

#[test]
fn match_conditions_errors_and_wrong_answers() {
    let request = http(json!({"attributes": {"method": "GET"}}));
    let conditions = |failure: &str, expression: &str| {
        format!(
            "  failurePolicy: {failure}\n  matchConditions:\n  - name: c\n    expression: {}\n",
            serde_json::to_string(expression).unwrap()
        )
    };
    let allow = ["http.Allowed().Response()"];
    for (extra, validations, want) in [
        (
            conditions("Fail", "object.attributes.method == 'POST'"),
            &allow[..],
            (RuleStatus::Skip, "request does not match"),
        ),
        (
            conditions("Ignore", "object.attributes.nope == 'x'"),
            &allow[..],
            (RuleStatus::Skip, "request does not match"),
        ),
        (
            conditions("Fail", "object.attributes.method == 'GET'"),
            &["null", "true ? null : http.Allowed().Response()"][..],
            (RuleStatus::Skip, "request does not match"),
        ),
        (
            String::new(),
            &["true"][..],
            (
                RuleStatus::Error,
                "rule result is expected to be *http.CheckResponse",
            ),
        ),
    ] {
        let (status, message) = run(&compile("HTTP", &extra, validations), &request);
        assert_eq!((status, message.as_str()), want, "{extra} {validations:?}");
    }
    let (status, message) = run(
        &compile(
            "HTTP",
            &conditions("Fail", "object.attributes.nope == 'x'"),
            &allow,
        ),
        &request,
    );
    assert_eq!(status, RuleStatus::Error);
    assert!(message.contains("nope"), "{message}");
}

const CONSTRAINTS: &str = "  matchConstraints:\n    resourceRules:\n    - {apiGroups: [''], \
                           apiVersions: [v1], operations: [CREATE], resources: [pods]}\n";

#[test]
fn each_mode_declares_its_own_library() {
    for (mode, validation) in [
        ("Kubernetes", "envoy.Allowed().Response() != null"),
        ("JSON", "jwt.Decode('a', 'b') != null"),
        ("HTTP", "envoy.Allowed().Response()"),
        ("Envoy", "http.Denied('x').Response()"),
    ] {
        match try_compile(mode, CONSTRAINTS, &[validation]) {
            Err(CelCompileError::Invalid(e)) => {
                assert!(e.contains("undeclared reference to"), "{mode}: {e}")
            }
            other => panic!("{mode}: {validation}: {other:?}"),
        }
    }
    match try_compile("Ldap", "", &["true"]) {
        Err(CelCompileError::Invalid(e)) => assert!(e.contains("Unsupported value"), "{e}"),
        other => panic!("{other:?}"),
    }
    // A Kubernetes policy gives no answer on an authorization request.
    let kubernetes = compile("Kubernetes", CONSTRAINTS, &["true"]);
    let response = evaluate_authorization_policy(&kubernetes, &json!({}), &NoResolver);
    assert!(response.rules.is_empty());
}
