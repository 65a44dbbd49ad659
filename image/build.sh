#!/usr/bin/env bash
# gavel's container image, assembled without a Docker daemon.
#
#   image/build.sh [--binary PATH] [--out DIR]
#
# Writes to DIR (default target/image):
#   gavel-<version>.tar   a docker-archive tagged <repository>:<version>, the
#                         chart's default image (charts/gavel: image.repository,
#                         appVersion): `docker load`, `podman load`,
#                         `kind load image-archive`, `ctr -n k8s.io images import`
#   oci/                  the same image as an OCI image layout: `crane push
#                         DIR/oci REGISTRY/gavel:<version>`, `skopeo copy oci:...`
#   rootfs/               what the layer holds, unpacked
#
# The image is one layer on an empty base: the stripped `gavel` binary, the
# shared libraries it links (taken from this machine, the same ones it was
# built against: glibc, libgcc_s), a non-root user 65532 (the chart's
# runAsUser), the CA bundle and an empty /tmp. Nothing else: no shell, no
# package manager. The Entrypoint is gavel; the chart passes `serve ...` as
# arguments.
#
# crane (go-containerregistry, pinned in e2e/versions.env) builds it through a
# registry it serves in memory on 127.0.0.1 for the duration of the script:
# append the layer to an empty base, set the config, pull it back. The layer
# is written reproducibly (sorted names, mtime 0, numeric owners) and crane
# dates the image at the epoch, so the same binary gives the same digest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
binary=""
out="$repo/target/image"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: image/build.sh [--binary PATH] [--out DIR]" >&2; exit 2 ;;
  esac
done

log() { echo "image/build.sh: $*" >&2; }

version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/gavel/Chart.yaml")"
repository="$(awk '/^image:/ {in_image=1; next} in_image && /^  repository:/ {print $2; exit}' \
  "$repo/charts/gavel/values.yaml")"
[ -n "$version" ] && [ -n "$repository" ] || { log "no appVersion or image.repository in charts/gavel"; exit 1; }

"$repo/e2e/cluster.sh" build crane
crane="${GAVEL_E2E_CACHE:-$HOME/.cache/gavel-e2e}/bin/crane"

if [ -z "$binary" ]; then
  (cd "$repo" && cargo build --release --bin gavel)
  binary="$repo/target/release/gavel"
fi

rm -rf "$out"
mkdir -p "$out"
root="$out/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
strip --strip-debug -o "$root/usr/local/bin/gavel" "$binary"

# Every library the dynamic loader resolves, at the path it resolves it to,
# and the loader itself.
libs="$(ldd "$binary" | awk '/=> \// {print $3} /^\t\// {print $1}')"
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
chmod 1777 "$root/tmp"

layer="$out/layer.tar"
tar --sort=name --mtime=@0 --numeric-owner --owner=0 --group=0 --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  --exclude=./home/nonroot -C "$root" -cf "$layer" .
# The home directory belongs to the user (tar gives every entry one owner).
tar --sort=name --mtime=@0 --numeric-owner --owner=65532 --group=65532 --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$root" -rf "$layer" ./home/nonroot

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$crane" registry serve --address "127.0.0.1:$port" > "$out/registry.log" 2>&1 &
registry_pid=$!
trap 'kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

staging="127.0.0.1:$port/gavel:$version"
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch="$(uname -m)" ;;
esac
"$crane" append --oci-empty-base -f "$layer" -t "$staging" > /dev/null 2>> "$out/crane.log"
config=(
  --entrypoint /usr/local/bin/gavel
  --user 65532:65532
  --workdir /
  --set-platform "linux/$arch"
  --label "org.opencontainers.image.title=gavel"
  --label "org.opencontainers.image.description=Kubernetes admission for Kyverno policies"
  --label "org.opencontainers.image.version=$version"
  --label "org.opencontainers.image.revision=$revision"
)
"$crane" mutate "$staging" "${config[@]}" -t "$staging" > /dev/null 2>> "$out/crane.log"
"$crane" pull --format oci "$staging" "$out/oci" 2>> "$out/crane.log"
# The archive carries the chart's image name, not the staging registry's.
"$crane" mutate "$staging" -t "$repository:$version" -o "$out/gavel-$version.tar" > /dev/null 2>> "$out/crane.log"
rm -f "$layer"
digest="$("$crane" digest "$staging")"
log "$repository:$version ($digest, linux/$arch) in $out"
echo "$digest" > "$out/digest"
