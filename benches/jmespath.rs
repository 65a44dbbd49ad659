//! gavel's JMESPath engine against the `jmespath` crate (feature `sync`) on
//! expressions Kyverno policies use, over the JSON context of the violating
//! Pod of `benches/data/`. The crate gets its best case (expression compiled
//! and input converted once); a second id adds the per-request conversion of
//! the context that the engine would otherwise pay.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;
use std::path::Path;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const EXPRESSIONS: &[(&str, &str)] = &[
    ("path", "request.object.metadata.name"),
    (
        "multiselect",
        "request.object.spec.[ephemeralContainers, initContainers, containers][].securityContext.capabilities.add[]",
    ),
    (
        "filter",
        "request.object.spec.containers[?securityContext.privileged == `true`].name",
    ),
    (
        "functions",
        "length(request.object.spec.containers[*].image) > `0` && contains(keys(request.object.metadata), 'name')",
    ),
];

fn context() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/pod-violating.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let pod = gavel::policy::load::parse_yaml_documents("pod", &text)
        .unwrap()
        .remove(0);
    json!({"request": {"operation": "CREATE", "object": pod}})
}

fn bench(c: &mut Criterion) {
    let data = context();
    let mut group = c.benchmark_group("jmespath");
    for (id, src) in EXPRESSIONS {
        let ours = gavel::jmespath::Expression::parse(src).unwrap();
        let theirs = jmespath::compile(src).unwrap();
        let converted: jmespath::Rcvar =
            std::sync::Arc::new(jmespath::Variable::from_json(&data.to_string()).unwrap());
        let ours_result = ours.search(&data).unwrap().into_owned();
        let theirs_result: Value =
            serde_json::from_str(&theirs.search(converted.clone()).unwrap().to_string()).unwrap();
        assert_eq!(ours_result, theirs_result, "{id}: engines disagree");
        group.bench_function(format!("gavel/{id}"), |b| {
            b.iter(|| ours.search(black_box(&data)).unwrap().into_owned())
        });
        group.bench_function(format!("crate/{id}"), |b| {
            b.iter(|| theirs.search(black_box(converted.clone())).unwrap())
        });
        group.bench_function(format!("crate-with-conversion/{id}"), |b| {
            b.iter(|| {
                let input = jmespath::Variable::from_serializable(black_box(&data)).unwrap();
                theirs.search(input).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
