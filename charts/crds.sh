#!/usr/bin/env bash
# Puts Kyverno's CRDs, at the Kyverno version pinned in e2e/versions.env,
# into charts/crds/ and, with --apply, applies them to the current cluster:
#
#   charts/crds.sh --apply    then  helm install gavel charts/gavel -n gavel --create-namespace
#
# They are not in the chart's crds/ folder: Helm keeps a chart's files in
# its release Secret, and Kyverno's CRDs (5.6 MB of schemas) make it larger
# than a Secret may be (1 MiB; measured: `helm install` fails with "data:
# Too long"). Server-side apply, because the schemas also exceed the
# last-applied annotation client-side apply writes. Rerun it to upgrade them.
#
# The CRDs come from the github.com/kyverno/kyverno module (config/crds), as
# Kyverno's release ships them; they are not kept in this repository. Skip
# this step where Kyverno's CRDs are already installed (Kyverno itself
# running beside gavel, or installed by other means).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/../e2e/cluster.sh" build kyverno-crds
cache="${GAVEL_E2E_CACHE:-$HOME/.cache/gavel-e2e}"
out="$here/crds"
rm -rf "$out"
mkdir -p "$out"
# openreports.io CRDs are fetched beside them for the e2e tests; these are
# Kyverno's own (openreports is opt-in: the chart's reports.openreports).
find "$cache/kyverno-crds" -name '*.yaml' ! -name 'openreports.io_*' -exec cp {} "$out/" \;
echo "charts/crds.sh: $(ls "$out" | wc -l) CRDs in $out" >&2
if [ "${1:-}" = --apply ]; then
  kubectl apply --server-side --force-conflicts -f "$out"
fi
