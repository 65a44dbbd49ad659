# Sourced by the load scripts (k6/*.sh, image/pgo-build.sh).
#
# wait_until_serving PORT...: waits (up to 10 s each) until something
# answers HTTPS on each 127.0.0.1 PORT. Any answer counts, a 404 too: gavel
# and examples/baseline_server both answer a POST to `/`.
wait_until_serving() {
  local port
  for port in "$@"; do
    for _ in $(seq 50); do
      curl -sk -o /dev/null -X POST "https://127.0.0.1:$port/" && break
      sleep 0.2
    done
  done
}
