//! Watches: replayed history, live events, bookmarks, 410 Gone.

use super::*;

/// A watch: the events after the requested resourceVersion (or synthetic
/// ADDED events for the current state when none is given), then live
/// events, bookmarks and, when history is gone, a 410 ERROR event.
pub(super) fn watch_response(
    shared: &Arc<Shared>,
    target: &Target,
    filter: Filter,
    query: &Map<String, Value>,
) -> Response<Body> {
    let param = |k: &str| {
        query
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    if matches!(param("sendInitialEvents").as_str(), "true" | "1") {
        return status(
            422,
            "Invalid",
            "sendInitialEvents is not supported by this server: list, then watch".into(),
            None,
        );
    }
    let bookmarks = matches!(param("allowWatchBookmarks").as_str(), "true" | "1");
    let timeout = param("timeoutSeconds")
        .parse::<u64>()
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let start = param("resourceVersion");
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut changed = shared.changed.subscribe();
    let mut cut = shared.cut_watches.subscribe();
    let mut up = shared.up.subscribe();
    let interval = shared.config.bookmark_interval;
    let ty = target.type_key();
    let shown = target.clone();
    let present = move |o: &Value| present(o, &shown);
    let line = |kind: &str, object: Value| {
        let mut bytes = serde_json::to_vec(&json!({"type": kind, "object": object})).expect("JSON");
        bytes.push(b'\n');
        Bytes::from(bytes)
    };
    // Work that needs the store lock is done here, synchronously.
    let (initial, mut cursor) = {
        let store = shared.store.lock().unwrap();
        match start.as_str() {
            "" | "0" => {
                let lines: Vec<Bytes> = store
                    .objects
                    .get(&ty)
                    .into_iter()
                    .flat_map(|m| m.values())
                    .filter(|o| filter.matches(o))
                    .map(|o| line("ADDED", present(o)))
                    .collect();
                (lines, store.rv)
            }
            rv => match rv.parse::<u64>() {
                Ok(rv) => (Vec::new(), rv),
                Err(_) => {
                    return status(
                        400,
                        "BadRequest",
                        format!("invalid resourceVersion {rv:?}"),
                        None,
                    );
                }
            },
        }
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        for l in initial {
            if tx.send(l).await.is_err() {
                return;
            }
        }
        loop {
            let batch: Result<Vec<Bytes>, u64> = {
                let store = shared.store.lock().unwrap();
                match store.events_after(cursor) {
                    Err(gone) => Err(gone),
                    Ok(events) => {
                        let lines: Vec<Bytes> = events
                            .filter(|e| e.ty == ty)
                            .filter_map(|e| {
                                let now = filter.matches(&e.object);
                                let before = e.old.as_ref().map(|o| filter.matches(o));
                                let kind = match (e.kind, before, now) {
                                    (EventType::Modified, Some(true), true) => "MODIFIED",
                                    (EventType::Modified, Some(false), true) => "ADDED",
                                    (EventType::Modified, Some(true), false) => "DELETED",
                                    (EventType::Added, _, true) => "ADDED",
                                    (EventType::Deleted, _, true) => "DELETED",
                                    _ => return None,
                                };
                                Some(line(kind, present(&e.object)))
                            })
                            .collect();
                        cursor = store.rv;
                        Ok(lines)
                    }
                }
            };
            match batch {
                Ok(lines) => {
                    for l in lines {
                        if tx.send(l).await.is_err() {
                            return;
                        }
                    }
                }
                Err(_) => {
                    let gone = json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": format!("too old resource version: {cursor}"),
                        "reason": "Expired", "code": 410,
                    });
                    let _ = tx.send(line("ERROR", gone)).await;
                    return;
                }
            }
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                _ = tokio::time::sleep(interval), if bookmarks => {
                    let bookmark = json!({
                        "kind": present(&json!({}))["kind"], "apiVersion": present(&json!({}))["apiVersion"],
                        "metadata": {"resourceVersion": cursor.to_string(),
                                     "annotations": {"k8s.io/initial-events-end": "true"}},
                    });
                    if tx.send(line("BOOKMARK", bookmark)).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = cut.changed() => return,
                _ = until_down(&mut up) => return,
            }
        }
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(ChannelBody(rx).boxed())
        .expect("response")
}

/// A response body fed by a channel: one chunk per watch event.
pub(super) struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}
