#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1, built from Go modules.
#
#   e2e/cluster.sh build          build the pinned parts once into the cache
#   e2e/cluster.sh build kyverno  build Kyverno's admission controller and CLI, the peer
#                                 gavel is measured against (not needed by the tests)
#   e2e/cluster.sh build crane    build only crane, which image/build.sh needs
#   e2e/cluster.sh build kyverno-crds   fetch only Kyverno's CRDs (charts/crds.sh)
#   e2e/cluster.sh up [--nodes N] start etcd, kube-apiserver, kube-controller-manager,
#                                 kube-scheduler and kwok with N fake nodes (default 10)
#   e2e/cluster.sh down           stop exactly what `up` started (recorded pids)
#   e2e/cluster.sh stop PART      stop one part (kube-apiserver, etcd, ...), for outage tests
#   e2e/cluster.sh start PART     start a stopped part again with the arguments `up` gave it
#   e2e/cluster.sh env            print `export KUBECONFIG=...` and the tools' PATH
#   e2e/cluster.sh pin            regenerate e2e/go/kube/go.mod from versions.env
#
# GAVEL_E2E_CACHE (default ~/.cache/gavel-e2e) holds the binaries and Kyverno's
# CRDs; Go's own module and build caches are reused as they are. GAVEL_E2E_DIR
# (default $GAVEL_E2E_CACHE/run) holds one running cluster: certificates, etcd's
# data, logs, pids, ports and the admin kubeconfig. Several clusters can run at
# once with different GAVEL_E2E_DIRs: every port is chosen free at `up`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${GAVEL_E2E_CACHE:-$HOME/.cache/gavel-e2e}"
bin="$cache/bin"
dir="${GAVEL_E2E_DIR:-$cache/run}"

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# --- build -----------------------------------------------------------------

# A part is rebuilt only when what it is built from changes: its versions, the
# wrapper module's go.sum, and the Go toolchain.
stamp_of() {
  local part="$1"
  case "$part" in
    kube) echo "$KUBERNETES_VERSION $ETCD_VERSION $(sha256sum "$here/go/kube/go.sum" "$here/go/kube/etcd/main.go" | sha256sum | cut -c1-16)" ;;
    kwok) echo "$KWOK_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    kyverno-crds) echo "$KYVERNO_VERSION openreports" ;;
    kyverno) echo "$KYVERNO_VERSION" ;;
    crane) echo "$CRANE_VERSION" ;;
    monitoring-crds) echo "$PROMETHEUS_OPERATOR_VERSION" ;;
    kyverno-dashboards) echo "$KYVERNO_VERSION" ;;
  esac
  go env GOVERSION
}

up_to_date() {
  local part="$1"; shift
  [ -f "$cache/stamps/$part" ] && [ "$(cat "$cache/stamps/$part")" = "$(stamp_of "$part")" ] || return 1
  local f
  for f in "$@"; do [ -e "$f" ] || return 1; done
}

stamp() { mkdir -p "$cache/stamps"; stamp_of "$1" > "$cache/stamps/$1"; }

# Timing of each part goes to stderr and to $cache/build-times.log.
timed() {
  local part="$1"; shift
  local start=$SECONDS
  "$@"
  local took=$((SECONDS - start))
  log "built $part in ${took}s"
  echo "$(date -u +%FT%TZ) $part ${took}s" >> "$cache/build-times.log"
}

build_kube() {
  local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  # Without the version, /version says v0.0.0 and clients that check it
  # (Helm's kubeVersion, Kyverno, kubectl's skew warning) misbehave.
  local ldflags="-s -w"
  ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  (cd "$here/go/kube" && go build -ldflags "$ldflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    ./etcd)
}

# The kwok controller with the stages kwokctl runs by default ("fast": nodes
# ready at once with Lease heartbeats, Pods running at once), taken from the
# same module: without stages the controller refuses to start.
# The directory of a Go module as downloaded into the module cache.
module_dir() {
  (cd "$cache" && go mod download -json "$1") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

build_kwok() {
  # Called where `set -e` does not apply: each step checks.
  GOBIN="$bin" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" || return 1
  local src
  src="$(module_dir "sigs.k8s.io/kwok@$KWOK_VERSION")"
  rm -rf "$cache/kwok-stages"
  mkdir -p "$cache/kwok-stages"
  local stage
  for stage in node/fast node/heartbeat-with-lease pod/fast; do
    find "$src/kustomize/stage/$stage" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml \
      -exec cp {} "$cache/kwok-stages/" \; || return 1
  done
  chmod -R u+w "$cache/kwok-stages"
}

# prometheus-operator's ServiceMonitor CRD (example/prometheus-operator-crd in
# its module), for the chart's optional ServiceMonitor.
fetch_monitoring_crds() {
  local src
  src="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")"
  [ -f "$src/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" ] || return 1
  rm -rf "$cache/monitoring-crds"
  mkdir -p "$cache/monitoring-crds"
  cp "$src/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$cache/monitoring-crds/"
  chmod -R u+w "$cache/monitoring-crds"
}

# Kyverno's Grafana dashboard (charts/kyverno/charts/grafana in its module):
# tests/e2e.rs reads its queries against gavel's metrics.
fetch_kyverno_dashboards() {
  local src
  src="$(module_dir "github.com/kyverno/kyverno@$KYVERNO_VERSION")"
  [ -d "$src/charts/kyverno/charts/grafana/dashboard" ] || return 1
  rm -rf "$cache/kyverno-dashboards"
  mkdir -p "$cache/kyverno-dashboards"
  cp "$src"/charts/kyverno/charts/grafana/dashboard/*.json "$cache/kyverno-dashboards/"
  chmod -R u+w "$cache/kyverno-dashboards"
}

build_crane() {
  GOBIN="$bin" go install -ldflags "-s -w" \
    "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
}

build_helm() {
  local major="${HELM_VERSION%%.*}"
  GOBIN="$bin" go install -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/$major/cmd/helm@$HELM_VERSION"
}

# Kyverno's CRDs as its release ships them (config/crds in its module), one
# file per CRD, for `kubectl apply --server-side`.
fetch_kyverno_crds() {
  local src
  src="$(module_dir "github.com/kyverno/kyverno@$KYVERNO_VERSION")"
  [ -d "$src/config/crds" ] || die "no config/crds in github.com/kyverno/kyverno@$KYVERNO_VERSION ($src)"
  rm -rf "$cache/kyverno-crds"
  mkdir -p "$cache/kyverno-crds"
  find "$src/config/crds" -name '*.yaml' -exec cp {} "$cache/kyverno-crds/" \; || return 1
  # The openreports.io Report and ClusterReport (Kyverno's
  # --openreportsEnabled), at the version Kyverno's go.mod requires.
  local reports_version reports_src
  reports_version="$(sed -n 's/^\tgithub.com\/openreports\/reports-api \(v[^ ]*\).*/\1/p' "$src/go.mod")"
  [ -n "$reports_version" ] || die "no github.com/openreports/reports-api in $src/go.mod"
  reports_src="$(module_dir "github.com/openreports/reports-api@$reports_version")"
  [ -d "$reports_src/config/crd" ] || die "no config/crd in github.com/openreports/reports-api@$reports_version"
  find "$reports_src/config/crd" -name 'openreports.io_*.yaml' -exec cp {} "$cache/kyverno-crds/" \; || return 1
  chmod -R u+w "$cache/kyverno-crds"
}

# Kyverno's admission controller and CLI, built in its own module as
# downloaded: its go.mod and go.sum are the main module's, so its replace
# line (k8s.io/pod-security-admission => its fork) and every pinned version
# apply exactly as in its release build, with nothing to repeat or drift.
build_kyverno() {
  local src
  src="$(module_dir "github.com/kyverno/kyverno@$KYVERNO_VERSION")"
  [ -f "$src/go.mod" ] || return 1
  (cd "$src" && go build -buildvcs=false \
    -ldflags "-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$KYVERNO_VERSION" \
    -o "$bin/" ./cmd/kyverno ./cmd/cli/kubectl-kyverno)
  # Its chart, without the subcharts it would fetch from the internet
  # (kyverno-api, openreports, reports-server): the CRDs come from
  # config/crds instead, and the reports server is off by default.
  rm -rf "$cache/kyverno-chart"
  cp -r "$src/charts/kyverno" "$cache/kyverno-chart" && chmod -R u+w "$cache/kyverno-chart" || return 1
  rm -f "$cache/kyverno-chart/Chart.lock"
  awk '
    function flush() { if (entry != "" && entry !~ /repository:/) printf "%s", entry; entry = "" }
    /^dependencies:/ { deps = 1; print; next }
    deps && /^  - name:/ { flush(); entry = $0 "\n"; next }
    deps && /^    / { entry = entry $0 "\n"; next }
    deps { flush(); deps = 0 }
    { print }
    END { flush() }
  ' "$src/charts/kyverno/Chart.yaml" > "$cache/kyverno-chart/Chart.yaml"
}

cmd_build() {
  command -v go >/dev/null || die "Go is required (the machine image ships it)"
  mkdir -p "$bin"
  export CGO_ENABLED=0 GOFLAGS=-trimpath
  local failed=()
  if [ "${1:-}" = kyverno ]; then
    up_to_date kyverno "$bin/kyverno" "$bin/kubectl-kyverno" "$cache/kyverno-chart" \
      || { timed kyverno build_kyverno && stamp kyverno; } || die "failed to build: kyverno"
    log "Kyverno $KYVERNO_VERSION built in $bin"
    return
  fi
  if [ "${1:-}" = crane ]; then
    up_to_date crane "$bin/crane" || { timed crane build_crane && stamp crane; } || die "failed to build: crane"
    return
  fi
  if [ "${1:-}" = kyverno-crds ]; then
    up_to_date kyverno-crds "$cache/kyverno-crds" || { timed kyverno-crds fetch_kyverno_crds && stamp kyverno-crds; } \
      || die "failed to fetch: kyverno-crds"
    return
  fi
  up_to_date kube "$bin/kube-apiserver" "$bin/kube-controller-manager" "$bin/kube-scheduler" "$bin/kubectl" "$bin/etcd" \
    || { timed kube build_kube && stamp kube; } || failed+=(kube)
  up_to_date kwok "$bin/kwok" "$cache/kwok-stages" || { timed kwok build_kwok && stamp kwok; } || failed+=(kwok)
  up_to_date helm "$bin/helm" || { timed helm build_helm && stamp helm; } || failed+=(helm)
  up_to_date crane "$bin/crane" || { timed crane build_crane && stamp crane; } || failed+=(crane)
  up_to_date monitoring-crds "$cache/monitoring-crds" \
    || { timed monitoring-crds fetch_monitoring_crds && stamp monitoring-crds; } || failed+=(monitoring-crds)
  up_to_date kyverno-dashboards "$cache/kyverno-dashboards" \
    || { timed kyverno-dashboards fetch_kyverno_dashboards && stamp kyverno-dashboards; } \
    || failed+=(kyverno-dashboards)
  up_to_date kyverno-crds "$cache/kyverno-crds" || { timed kyverno-crds fetch_kyverno_crds && stamp kyverno-crds; } \
    || failed+=(kyverno-crds)
  [ ${#failed[@]} -eq 0 ] || die "failed to build: ${failed[*]}"
  log "all parts built in $bin ($(du -sh "$cache" | cut -f1) in $cache)"
}

# --- pin -------------------------------------------------------------------

# The replace lines come from k8s.io/kubernetes's own go.mod at the pinned
# tag: every staging module it replaces with a local path.
cmd_pin() {
  local gomod minor
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
  minor="${KUBERNETES_VERSION#v1.}"
  {
    echo "// Generated by e2e/cluster.sh pin from e2e/versions.env: k8s.io/kubernetes"
    echo "// requires its staging modules at v0.0.0 and replaces them with local paths,"
    echo "// which a dependency's go.mod cannot do; each is replaced here with its"
    echo "// published version."
    echo "module gavel.dev/e2e/kube"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | while read -r m; do
      echo "	$m => $m v0.$minor"
    done
    echo ")"
  } > "$here/go/kube/go.mod"
  rm -f "$here/go/kube/go.sum"
  local t
  (cd "$here/go/kube" && for t in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
     go get -tool "k8s.io/kubernetes/cmd/$t@$KUBERNETES_VERSION"
   done && go mod tidy)
}

# --- up / down -------------------------------------------------------------

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# One certificate signed by the cluster CA: name, CN, O (or ""), SANs (or "").
issue_cert() {
  local name="$1" cn="$2" org="$3" sans="$4"
  local subj="/CN=$cn"
  [ -n "$org" ] && subj="/O=$org$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/pki/$name.key" -subj "$subj" \
    -out "$dir/pki/$name.csr" 2>/dev/null
  local ext="$dir/pki/$name.ext"
  if [ -n "$sans" ]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" > "$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' > "$ext"
  fi
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$ext" -out "$dir/pki/$name.crt" 2>/dev/null
}

write_kubeconfig() {
  local file="$1" cert="$2" server="$3"
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gavel-e2e
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 < "$dir/pki/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 < "$dir/pki/$cert.crt")
    client-key-data: $(base64 -w0 < "$dir/pki/$cert.key")
contexts:
- name: gavel-e2e
  context: {cluster: gavel-e2e, user: $cert}
current-context: gavel-e2e
EOF
}

# Starts a process in its own session with its output in logs/NAME.log and
# records its pid, so that `down` stops exactly it, and its command line, so
# that `start NAME` can start it again after `stop NAME`.
start() {
  local name="$1"; shift
  mkdir -p "$dir/cmds"
  printf '%q ' "$@" > "$dir/cmds/$name"
  setsid "$@" >> "$dir/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/pids/$name.pid"
}

# SIGTERM, then SIGKILL after 5 s; forgets the pid.
stop_part() {
  local name="$1" pid
  [ -f "$dir/pids/$name.pid" ] || return 0
  pid="$(cat "$dir/pids/$name.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pids/$name.pid"
}

cmd_stop() {
  [ $# -eq 1 ] || die "usage: stop PART"
  [ -f "$dir/cmds/$1" ] || die "stop: $1 was not started in $dir"
  stop_part "$1"
  log "stop: $1 stopped"
}

cmd_start() {
  [ $# -eq 1 ] || die "usage: start PART"
  local name="$1"
  [ -f "$dir/cmds/$name" ] || die "start: $name was never started in $dir"
  running "$name" && die "start: $name is running"
  eval "start $name $(cat "$dir/cmds/$name")"
  case "$name" in
    etcd) wait_for "etcd health" etcd 60 curl -sf "http://127.0.0.1:$(cat "$dir/ports/etcd")/health" ;;
    kube-apiserver) wait_for "kube-apiserver readiness" kube-apiserver 120 admin_get /readyz ;;
  esac
  log "start: $name started"
}

running() { [ -f "$dir/pids/$1.pid" ] && kill -0 "$(cat "$dir/pids/$1.pid")" 2>/dev/null; }

wait_for() {
  local what="$1" name="$2" seconds="$3"; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    running "$name" || { tail -n 30 "$dir/logs/$name.log" >&2; die "$name exited while waiting for $what"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$dir/logs/$name.log" >&2; die "timed out waiting for $what"; }
    sleep 0.2
  done
}

admin_get() {
  curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://127.0.0.1:$(cat "$dir/ports/apiserver")$1"
}

cmd_up() {
  local nodes=10
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) nodes="$2"; shift 2 ;;
      --nodes=*) nodes="${1#--nodes=}"; shift ;;
      *) die "up: unknown argument $1" ;;
    esac
  done
  local part
  for part in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl; do
    [ -x "$bin/$part" ] || die "$bin/$part is missing: run e2e/cluster.sh build"
  done
  if [ -d "$dir/pids" ] && ls "$dir"/pids/*.pid >/dev/null 2>&1; then
    for part in "$dir"/pids/*.pid; do
      kill -0 "$(cat "$part")" 2>/dev/null && die "a cluster is already running in $dir: e2e/cluster.sh down first"
    done
  fi
  rm -rf "$dir"
  mkdir -p "$dir"/{pki,logs,pids,ports,etcd}
  # A failed start leaves nothing running.
  trap 'log "up failed: logs in $dir/logs"; cmd_down' ERR EXIT

  local etcd_port etcd_peer api_port
  etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)
  echo "$etcd_port" > "$dir/ports/etcd"
  echo "$api_port" > "$dir/ports/apiserver"

  # The cluster CA signs the API server's serving certificate and every client
  # certificate; the service-account key signs tokens (TokenRequest).
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$dir/pki/ca.key" -subj "/CN=gavel-e2e-ca" \
    -days 30 -out "$dir/pki/ca.crt" 2>/dev/null
  issue_cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  issue_cert admin kubernetes-admin system:masters ""
  issue_cert controller-manager system:kube-controller-manager "" ""
  issue_cert scheduler system:kube-scheduler "" ""
  issue_cert kwok kwok-controller system:masters ""
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null

  local server="https://127.0.0.1:$api_port"
  write_kubeconfig "$dir/admin.kubeconfig" admin "$server"
  write_kubeconfig "$dir/controller-manager.kubeconfig" controller-manager "$server"
  write_kubeconfig "$dir/scheduler.kubeconfig" scheduler "$server"
  write_kubeconfig "$dir/kwok.kubeconfig" kwok "$server"

  # Metadata of every request and the bodies of writes, for the tests that
  # read who wrote what; reads are logged at Metadata too.
  cat > "$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: Metadata
EOF

  # --unsafe-no-fsync: a throwaway test cluster; fsync would make the disk the
  # bottleneck of every write benchmark.
  start etcd "$bin/etcd" --name default --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --log-level warn
  wait_for "etcd health" etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"

  # The endpoint reconciler of the `kubernetes` Service rejects an advertised
  # address in the loopback range; nothing here runs in a pod that would need
  # that Service's endpoints, so it is off.
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --endpoint-reconciler-type none \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" \
    --authorization-mode Node,RBAC \
    --allow-privileged=true \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/logs/audit.log" \
    --audit-log-maxsize 1024 \
    --profiling=false
  wait_for "kube-apiserver readiness" kube-apiserver 120 admin_get /readyz

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --use-service-account-credentials \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --cluster-signing-cert-file "$dir/pki/ca.crt" --cluster-signing-key-file "$dir/pki/ca.key" \
    --controllers '*,-node-ipam-controller'
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
    --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false

  local kwok_port; kwok_port=$(free_port)
  local stages
  stages="$(ls "$cache"/kwok-stages/*.yaml | paste -sd, -)"
  start kwok "$bin/kwok" --kubeconfig "$dir/kwok.kubeconfig" --config "$stages" \
    --manage-all-nodes=true --server-address "127.0.0.1:$kwok_port" \
    --node-ip 127.0.0.1 --node-lease-duration-seconds 40

  # The default ServiceAccount is what every Pod of a new namespace needs:
  # its creation shows the controller-manager is working.
  wait_for "the default ServiceAccount" kube-controller-manager 60 \
    admin_get /api/v1/namespaces/default/serviceaccounts/default
  python3 "$here/../kwok/cluster-objects.py" --nodes "$nodes" --pods 0 --namespaces 0 \
    | "$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" create -f - >/dev/null
  trap - ERR EXIT
  log "up: $nodes nodes; export KUBECONFIG=$dir/admin.kubeconfig"
}

cmd_down() {
  [ -d "$dir/pids" ] || { log "down: nothing recorded in $dir"; return 0; }
  local name
  # Reverse start order: clients first, etcd last.
  for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_part "$name"
  done
  log "down: stopped the cluster in $dir"
}

cmd_env() {
  echo "export KUBECONFIG=$dir/admin.kubeconfig"
  echo "export PATH=$bin:\$PATH"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  env) shift; cmd_env "$@" ;;
  pin) shift; cmd_pin "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  start) shift; cmd_start "$@" ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
