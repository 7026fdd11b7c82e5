#!/usr/bin/env bash
# Cross-compiles the released commands for every platform we ship and
# writes, per platform, a tarball of the binaries with LICENSE and
# README.md; then the Python wheel and sdist and the npm tarball of the clients,
# stamped with the same version in a copy of HEAD's tree (the working tree
# is never modified); and one SHA256SUMS over all of them. `make release`
# runs it; the version comes from git (`git describe --tags`) as in
# `make build`.
#
# Usage: scripts/release.sh [--version V] [--commit C] [--dist DIR] [--platforms P]
#   --version  VERSION  (default: git describe --tags --always --dirty)
#   --commit   COMMIT   (default: git rev-parse --short=12 HEAD)
#   --dist     DIST     (default: dist): where the tarballs and SHA256SUMS go
#   --platforms  PLATFORMS  (default: every platform below): GOOS/GOARCH, space-separated
set -euo pipefail
cd "$(dirname "$0")/.."
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
dist=${DIST:-dist}
usage() { sed -n '10,14p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --version=*) version=${1#*=}; shift ;;
    --commit) commit=${2:?--commit needs a value}; shift 2 ;;
    --commit=*) commit=${1#*=}; shift ;;
    --dist) dist=${2:?--dist needs a value}; shift 2 ;;
    --dist=*) dist=${1#*=}; shift ;;
    --platforms) PLATFORMS=${2:?--platforms needs a value}; shift 2 ;;
    --platforms=*) PLATFORMS=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "release.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

# What a release holds: the daemon, the operator CLI, the MCP gateway and
# the health probe; and where it runs.
commands=(breakerd breakerctl breakerd-mcp healthcheck)
platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
if [ -n "${PLATFORMS:-}" ]; then
  read -r -a chosen <<<"$PLATFORMS"
  for p in "${chosen[@]}"; do
    [[ " ${platforms[*]} " == *" $p "* ]] || { echo "release.sh: no platform $p; the platforms: ${platforms[*]}" >&2; exit 2; }
  done
  platforms=("${chosen[@]}")
fi

pkg=github.com/breakerd/breakerd/internal/buildinfo
ldflags="-s -w -X $pkg.version=$version -X $pkg.commit=$commit"
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for platform in "${platforms[@]}"; do
  goos=${platform%/*} goarch=${platform#*/}
  name="breakerd_${version}_${goos}_${goarch}"
  mkdir -p "$work/$name"
  GOOS=$goos GOARCH=$goarch CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" \
    -o "$work/$name/" "${commands[@]/#/./cmd/}"
  cp LICENSE README.md "$work/$name/"
  # Reproducible archives: sorted names, one owner, the commit's time.
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$(git log -1 --format=%ct 2>/dev/null || echo 0)" -czf "$dist/$name.tar.gz" "$name"
  echo "release: $dist/$name.tar.gz"
done
# The clients' versions, derived from the tag: vX.Y.Z gives X.Y.Z to both.
# Anything after X.Y.Z (describe's "-3-gabc1234", "-dirty", a tag's "-ci")
# becomes PEP 440's local label ("+3.gabc1234", "+ci") for the wheel and
# semver's pre-release ("-3-gabc1234", "-ci") for npm; a bare commit
# (no tag reachable) is 0.0.0 with "g<commit>" as that suffix.
client_versions() {
  local v=${1#v} base rest
  if [[ $v =~ ^([0-9]+\.[0-9]+\.[0-9]+)(.*)$ ]]; then
    base=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]#[-+]}
  else
    base=0.0.0 rest=g$v
  fi
  rest=${rest//[^0-9A-Za-z.-]/-}
  if [ -z "$rest" ]; then
    pep440=$base semver=$base
  else
    pep440=$base+${rest//-/.} semver=$base-$rest
  fi
}
client_versions "$version"
git archive HEAD clients/python clients/typescript | tar -x -C "$work"
sed -i "s/^version = \".*\"$/version = \"$pep440\"/" "$work/clients/python/pyproject.toml"
# The wheel and the sdist (what PyPI takes), built and checked with the
# build and twine the Python suite pins.
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check \
  $(grep -E '^(build|twine)==' clients/python/requirements-test.txt | cut -d' ' -f1)
"$work/venv/bin/python" -m build --sdist --wheel --outdir "$dist" "$work/clients/python" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; exit 1; }
"$work/venv/bin/twine" check --strict "$dist/breakerd-$pep440-py3-none-any.whl" "$dist/breakerd-$pep440.tar.gz"
# npm pack builds the package first (its prepack script).
(cd "$work/clients/typescript" &&
  npm ci -s --prefer-offline --no-audit --no-fund --ignore-scripts &&
  npm pkg set version="$semver" &&
  npm pack -s --pack-destination "$dist" >/dev/null)
wheel=breakerd-$pep440-py3-none-any.whl sdist=breakerd-$pep440.tar.gz tgz=breakerd-client-$semver.tgz
for f in "$wheel" "$sdist" "$tgz"; do
  [ -f "$dist/$f" ] || { echo "release.sh: no $dist/$f" >&2; exit 1; }
  echo "release: $dist/$f"
done
(cd "$dist" && sha256sum breakerd_"${version}"_*.tar.gz "$wheel" "$sdist" "$tgz" > SHA256SUMS)
echo "release: $dist/SHA256SUMS"
