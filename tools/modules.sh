#!/usr/bin/env bash
# The repository's modules as a set: their versions, their tidying, and the
# check that a program outside the repository can use them. Run through make
# (make tidy, make bump-version VERSION=..., make modcheck); docs/modules.md
# explains the scheme.
#
#   tools/modules.sh version           the one version every module requires the others at
#   tools/modules.sh tidy [DIR...]     go mod tidy every module (or those in DIR...), its siblings served locally
#   tools/modules.sh bump VERSION      require the siblings at VERSION everywhere, then tidy and build
#   tools/modules.sh consumer [VERSION] build and run a program outside the repository
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
PREFIX=github.com/outbox-go/outbox
PG=${PG:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
NATS=${NATS:-nats://127.0.0.1:4222}

die() { echo "modules: $*" >&2; exit 1; }

# dirs lists the workspace's module folders; paths their module paths.
dirs() { GOWORK=$root/go.work $GO list -m -f '{{.Dir}}'; }
paths() { GOWORK=$root/go.work $GO list -m -f '{{.Path}}'; }

# siblings prints "path version" for each require of a sibling in the go.mod
# of the current folder.
siblings() {
  GOWORK=off $GO mod edit -print | awk -v p="$PREFIX" '
    $1 == "require" { $1 = ""; $0 = $0 }
    ($1 == p || index($1, p "/") == 1) && $2 ~ /^v/ { print $1, $2 }'
}

# version prints the version at which the modules require each other, and
# fails when they do not all agree.
version() {
  local vs
  vs=$(for d in $(dirs); do
    (cd "$d" && siblings) | cut -d' ' -f2
  done | sort -u)
  [ -n "$vs" ] || die "no module requires another"
  [ "$(echo "$vs" | wc -l)" = 1 ] || die "the modules require each other at more than one version: $(echo $vs)"
  echo "$vs"
}

# serve VERSION DIR lays every module out in DIR as a file-based proxy.
serve() {
  (cd tools && GOWORK=off $GO run ./modproxy -out "$2" -version "$1" $(dirs))
}

# withproxy DIR CMD... runs CMD outside the workspace, fetching this
# repository's modules from the proxy in DIR/proxy and every other module from
# the local module cache, then the usual proxy. With PRIVATE_CACHE=1 the module
# cache is DIR/modcache: a locally served copy of a real version (tidy serves
# the version the modules require) must never land in the shared cache, where it
# would shadow the real release.
withproxy() {
  local dir=$1; shift
  local shared; shared=$($GO env GOMODCACHE)
  local cache=$shared flags=${GOFLAGS:-}
  if [ "${PRIVATE_CACHE:-}" = 1 ]; then cache=$dir/modcache flags="$flags -modcacherw"; fi
  GOWORK=off GOMODCACHE=$cache GOFLAGS=$flags \
    GOPROXY="file://$dir/proxy,file://$shared/cache/download,$($GO env GOPROXY)" \
    GONOSUMDB=$PREFIX GONOSUMCHECK=1 "$@"
}

# forget VERSION removes this repository's modules at VERSION from the shared
# module cache.
forget() {
  local cache; cache=$($GO env GOMODCACHE)
  for d in "$cache/github.com/outbox-go" "$cache/cache/download/github.com/outbox-go"; do
    [ -d "$d" ] || continue
    find "$d" -name "*$1*" -prune -print0 | while IFS= read -r -d '' f; do chmod -R u+w "$f"; rm -rf "$f"; done
    find "$d" -name list -path '*/@v/*' -exec sed -i "/^${1//./\\.}\$/d" {} +
  done
}

tidy() {
  local v; v=$(version); tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  serve "$v" "$tmp/proxy"
  local todo=("$@"); [ ${#todo[@]} -gt 0 ] || todo=($(dirs))
  for d in "${todo[@]}"; do
    d=$(cd "$d" && pwd)
    echo "== go mod tidy ${d#$root/}"
    (cd "$d" && PRIVATE_CACHE=1 withproxy "$tmp" $GO mod tidy)
    # The sums of the locally served siblings are not the released ones.
    if [ -f "$d/go.sum" ]; then
      grep -v "^$PREFIX[ /]" "$d/go.sum" > "$tmp/go.sum" || true
      if [ -s "$tmp/go.sum" ]; then cp "$tmp/go.sum" "$d/go.sum"; else rm "$d/go.sum"; fi
    fi
  done
}

bump() {
  local new=$1 old p d args
  [[ $new =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION=$new: want a semantic version such as v0.2.0"
  old=$(version)
  # go.work maps each sibling at the required version to its folder.
  local work=""
  for p in $(paths); do
    d=$(GOWORK=$root/go.work $GO list -m -f '{{.Dir}}' "$p"); d=${d#"$root"}; d=.${d:+/${d#/}}
    work="$work -dropreplace=$p@$old -replace=$p@$new=$d"
  done
  for d in $(dirs); do
    args=$( (cd "$d" && siblings) | while read -r p _; do echo "-require=$p@$new"; done)
    [ -z "$args" ] || (cd "$d" && GOWORK=off $GO mod edit $args)
  done
  $GO work edit $work
  tidy
  for d in $(dirs); do (cd "$d" && $GO build ./... >/dev/null && $GO vet ./...); done
  echo "modules: every module now requires the others at $new"
}

consumer() {
  # A version of this run's own, never a real one, served through the shared
  # module cache (so that the third-party packages' builds are cached) and
  # removed from it afterwards.
  v=${1:-v0.0.0-modcheck.$(date +%s).$$}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"; forget "$v"' EXIT
  serve "$v" "$tmp/proxy"
  mkdir "$tmp/consumer"
  cp tools/modcheck/testdata/main.go "$tmp/consumer/"
  cat > "$tmp/consumer/go.mod" <<EOF
module example.com/consumer

go 1.26.0

require (
	$PREFIX $v
	$PREFIX/broker/outboxnats $v
	$PREFIX/driver/outboxpgx $v
)
EOF
  echo "== a program outside the repository, with the core, outboxpgx and outboxnats at $v"
  (cd "$tmp/consumer" && withproxy "$tmp" $GO mod tidy && withproxy "$tmp" $GO build -o consumer . &&
    ! grep -q replace go.mod && MODCHECK_PG=$PG MODCHECK_NATS=$NATS ./consumer)
  echo "== go install $PREFIX/cmd/outbox@$v"
  (cd "$tmp" && GOBIN=$tmp/bin withproxy "$tmp" $GO install "$PREFIX/cmd/outbox@$v" && "$tmp/bin/outbox" version)
}

case ${1:-} in
version) version ;;
tidy) shift; tidy "$@" ;;
bump) [ -n "${2:-}" ] || die "usage: $0 bump VERSION"; bump "$2" ;;
consumer) consumer "${2:-}" ;;
*) die "usage: $0 version|tidy|bump VERSION|consumer [VERSION]" ;;
esac
