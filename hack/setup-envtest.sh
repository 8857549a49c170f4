#!/usr/bin/env bash
# Supplies kube-apiserver, etcd, kubectl and kube-controller-manager for envtest, offline.
#
# Order of preference:
#   1. a preset KUBEBUILDER_ASSETS that holds all four binaries;
#   2. what setup-envtest already has in its store (or can download);
#   3. a build from the Go module proxy (k8s.io/kubernetes and etcd sources),
#      sideloaded into setup-envtest's store so later runs (and CI on this
#      machine) reuse it.
# kube-controller-manager is not in the published envtest archives; it is built
# the same way and added beside the other three (the clean-up tests run its
# garbage collector and namespace controller).
#
# Prints the asset directory as the last line of stdout; progress goes to stderr.
set -euo pipefail

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.37.2}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SETUP_ENVTEST="${SETUP_ENVTEST:-$ROOT/bin/setup-envtest}"
STORE="${ENVTEST_STORE:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}"

log() { echo "setup-envtest: $*" >&2; }

has_all() { [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ] && [ -x "$1/kubectl" ]; }

# build_from_source OUT TARGET... builds each "package:name" target into OUT
# from the Go module proxy.
build_from_source() {
  local out="$1"; shift
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/kubefence-envtest-build.XXXXXX")"
  (
    cd "$work"
    export GOFLAGS="-mod=mod"
    go mod init kubefence.local/envtest-build >/dev/null 2>&1
    modfile="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
    # k8s.io/kubernetes points its staging modules at ./staging; outside its own
    # tree each must be replaced with the published module of the same release.
    args=()
    for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
      args+=("-replace=$m=$m@$STAGING_VERSION")
    done
    go mod edit "${args[@]}" "-require=k8s.io/kubernetes@v$K8S_VERSION"
    {
      echo '//go:build tools'
      echo
      echo 'package tools'
      echo
      echo 'import ('
      for target in "$@"; do echo "	_ \"${target%%:*}\""; done
      echo ')'
    } > tools.go
    log "resolving modules"
    pkgs=(); for target in "$@"; do pkgs+=("${target%%:*}"); done
    go mod tidy >/dev/null 2>&1 || go get "${pkgs[@]}" >&2
    start=$SECONDS
    for target in "$@"; do
      pkg="${target%%:*}"; name="${target##*:}"
      log "building $name ($pkg) ..."
      t0=$SECONDS
      ( while sleep 30; do echo "setup-envtest:   ... still building $name ($((SECONDS - t0))s)" >&2; done ) &
      ticker=$!
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$name" "$pkg"
      kill "$ticker" 2>/dev/null || true
      log "built $name in $((SECONDS - t0))s"
    done
    log "built in $((SECONDS - start))s"
  )
  local rc=$?
  rm -rf "$work"
  return $rc
}

# with_controller_manager DIR adds kube-controller-manager to DIR when missing.
with_controller_manager() {
  local dir="$1"
  if [ ! -x "$dir/kube-controller-manager" ]; then
    log "kube-controller-manager $K8S_VERSION is not in $dir: building it from source (a few minutes, once)"
    local out
    out="$(mktemp -d "${TMPDIR:-/tmp}/kubefence-kcm.XXXXXX")"
    build_from_source "$out" "k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager"
    chmod u+w "$dir" 2>/dev/null || true
    cp "$out/kube-controller-manager" "$dir/kube-controller-manager.tmp"
    mv "$dir/kube-controller-manager.tmp" "$dir/kube-controller-manager"
    rm -rf "$out"
  fi
  echo "$dir"
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && has_all "$KUBEBUILDER_ASSETS"; then
  log "using preset KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  with_controller_manager "$KUBEBUILDER_ASSETS"
  exit 0
fi

if [ ! -x "$SETUP_ENVTEST" ]; then
  log "setup-envtest not found at $SETUP_ENVTEST (run 'make setup-envtest')"
  exit 1
fi

# 2. Already in the store, or downloadable (fails quickly when offline).
if dir=$("$SETUP_ENVTEST" use "$K8S_VERSION" --bin-dir "$STORE" -p path -i 2>/dev/null) && [ -n "$dir" ] && has_all "$dir"; then
  log "using cached control plane $K8S_VERSION in $dir"
  with_controller_manager "$dir"
  exit 0
fi
log "control plane $K8S_VERSION is not in $STORE; trying a download"
if dir=$(timeout 60 "$SETUP_ENVTEST" use "$K8S_VERSION" --bin-dir "$STORE" -p path 2>/dev/null) && [ -n "$dir" ] && has_all "$dir"; then
  log "downloaded control plane $K8S_VERSION into $dir"
  with_controller_manager "$dir"
  exit 0
fi

# 3. Build from source through the Go module proxy.
log "download unavailable: building kube-apiserver, kubectl, etcd and kube-controller-manager $K8S_VERSION from source"
log "(first time on a cold Go cache: about 15 minutes on 2 cores; cached afterwards)"
pkgdir="$(mktemp -d "${TMPDIR:-/tmp}/kubefence-envtest-pkg.XXXXXX")"
trap 'rm -rf "$pkgdir"' EXIT
# sideload wants the archive layout of the published tarballs: controller-tools/envtest/<bins>
out="$pkgdir/controller-tools/envtest"
mkdir -p "$out"
build_from_source "$out" \
  "k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver" \
  "k8s.io/kubernetes/cmd/kubectl:kubectl" \
  "go.etcd.io/etcd/server/v3:etcd" \
  "k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager"
tar -C "$pkgdir" -czf "$pkgdir/envtest-bins.tar.gz" controller-tools
"$SETUP_ENVTEST" sideload "$K8S_VERSION" --bin-dir "$STORE" -i < "$pkgdir/envtest-bins.tar.gz" >&2
dir=$("$SETUP_ENVTEST" use "$K8S_VERSION" --bin-dir "$STORE" -p path -i)
has_all "$dir" || { log "sideload did not produce all binaries in $dir"; exit 1; }
log "control plane $K8S_VERSION cached in $dir"
with_controller_manager "$dir"
