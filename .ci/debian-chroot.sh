#!/usr/bin/env bash
# .ci/debian-chroot.sh SUITE [COMMAND...]: what CI does on a bare Debian SUITE machine (bookworm,
# trixie, sid), in a chroot of that release, for a release we have no CI machine of, e.g.
#
#   .ci/debian-chroot.sh trixie             # Debian 13: make system-deps, make setup, make test
#   .ci/debian-chroot.sh trixie make lint   # one command instead
#
# The machine: a minbase debootstrap of SUITE with what a bare CI runner has and nothing more
# (git, make, python3, python3-venv, ca-certificates; root, no sudo; no recommended packages, so
# no openssh-client), built once and kept under $COREBURST_CHROOT_CACHE (/var/cache/coreburst)
# as debian-SUITE-<hash of SUITE, BASE_PACKAGES and RECIPE>. Each run starts from it afresh: the
# run writes to an overlay that is removed afterwards, so the kept machine stays bare and
# `make system-deps` installs everything the tests use, as on CI. Only download caches persist
# between runs (apt's .debs and pip's wheels, debian-SUITE-{apt,pip}-cache): they change how long
# a run takes, not what it installs.
# The project: a clean clone of this repository's HEAD (committed files only, as CI sees them;
# uncommitted changes are not in the run), at /ci/coreburst.
# The run: COMMAND, by default the three steps of `make test` (.ci/run without the other Slurm
# releases' chroots), each timed: make system-deps (apt-get from Debian's mirror), make setup
# (pip from PyPI), make test. CI=true (a test whose prerequisite is missing fails, not skips:
# tests/helpers/prereq.py); TEST_WORKERS=3 unless set (a shared two-core machine; CI uses the
# Makefile's 5).
#
# Isolation: the script runs in a private mount namespace (the overlay, /proc, /dev and /sys
# binds vanish with it); the chroot shares the host's network (apt and pip need it; the tests'
# servers take free ports on 127.0.0.1) and its process table: policy-rc.d stops packages from
# starting services (mariadb-server's would take port 3306), and whatever the chroot left running
# after a step is ended. Runs of the same SUITE may overlap; building its machine is locked.
#
# Needs root, debootstrap, unshare, chroot and flock (apt-get install -y debootstrap util-linux),
# the Debian mirror (DEBIAN_MIRROR) and PyPI. The host's CA bundle is copied in for pip (a proxy
# with a CA of its own). KEEP=1 keeps the run's directory (printed) for a look afterwards.
# SC2016: the single-quoted scripts get their values as arguments; SC2317: functions run by
# trap and by timed.
# shellcheck disable=SC2016,SC2317
set -euo pipefail
SUITE=${1:?usage: $0 bookworm|trixie|sid [command...]}
shift
case $SUITE in bookworm | trixie | sid) ;; *) echo "debian-chroot: no recipe for $SUITE: bookworm, trixie or sid" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "debian-chroot: needs root (debootstrap, chroot, namespaces)" >&2; exit 2; }
for tool in debootstrap unshare chroot flock git; do
  command -v $tool >/dev/null || { echo "debian-chroot: $tool missing (apt-get install -y debootstrap util-linux git)" >&2; exit 2; }
done
# The whole script in a private mount namespace: nothing it mounts outlives it.
if [ -z "${_COREBURST_CHROOT_NS:-}" ]; then
  exec unshare --mount --propagation private -- env _COREBURST_CHROOT_NS=1 "$0" "$SUITE" "$@"
fi

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COREBURST_CHROOT_CACHE:-/var/cache/coreburst}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export TEST_WORKERS=${TEST_WORKERS:-3}
RECIPE=1  # bump when the build steps below change what the machine holds
BASE_PACKAGES="git make python3 python3-venv ca-certificates"
PROJECT=/ci/coreburst
# COMMAND's words are joined and run by bash -c, as ssh runs a remote command.
if [ $# -gt 0 ]; then STEPS=("$*")
else STEPS=("make system-deps" "make setup" "make test"); fi

t0=$SECONDS
timings=()
step() { echo "debian-chroot: [$((SECONDS - t0))s] $*"; }
die() { echo "debian-chroot: $*" >&2; exit 2; }
timed() {  # timed NAME COMMAND...: run, print and record how long it took
  local name t=$SECONDS rc=0
  name=$(head -1 <<< "$1" | cut -c1-40)
  shift
  "$@" || rc=$?
  timings+=("$(printf '%-28s %5d s%s' "$name" $((SECONDS - t)) "$([ $rc = 0 ] || echo " (exit $rc)")")")
  step "$name: $((SECONDS - t)) s (exit $rc)"
  return $rc
}
logged() { local log=$1; shift; "$@" > "$log" 2>&1; }  # logged LOG COMMAND...
summary() {
  echo "debian-chroot: $SUITE, step times:"
  printf '  %s\n' "${timings[@]}" "$(printf '%-28s %5d s' total $SECONDS)"
}

key=$(printf '%s\n' "$SUITE" "$BASE_PACKAGES" "$RECIPE" | sha256sum | cut -c1-12)
BASE=$CACHE/debian-$SUITE-$key
mkdir -p "$CACHE"
exec 9>"$CACHE/debian-$SUITE.lock"
apt_opts=()
[ "$SUITE" = sid ] && apt_opts=(-o Acquire::Check-Valid-Until=false)

# The bare machine, built once (exclusive lock); runs hold the lock shared so that none is
# rebuilt under them.
build_base() {
  rm -rf "$BASE"
  step "debootstrap --variant=minbase $SUITE into $BASE"
  timed "debootstrap (cold)" logged "$CACHE/debootstrap-debian-$SUITE.log" \
    debootstrap --variant=minbase "$SUITE" "$BASE" "$MIRROR" ||
    { tail -20 "$CACHE/debootstrap-debian-$SUITE.log"; die "debootstrap failed"; }
  printf '#!/bin/sh\nexit 101\n' > "$BASE/usr/sbin/policy-rc.d"  # no service starts
  chmod 755 "$BASE/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$BASE/etc/resolv.conf"
  step "apt-get install --no-install-recommends $BASE_PACKAGES"
  mount -t proc proc "$BASE/proc"
  mount --rbind /dev "$BASE/dev"
  timed "apt: base packages (cold)" logged "$CACHE/apt-debian-$SUITE.log" \
    chroot "$BASE" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    /bin/sh -ec "
      apt-get ${apt_opts[*]} update -qq
      apt-get install -y -qq --no-install-recommends $BASE_PACKAGES
      apt-get clean" ||
    { tail -30 "$CACHE/apt-debian-$SUITE.log"; die "apt-get install failed"; }
  umount -R "$BASE/dev" "$BASE/proc"
  touch "$BASE/.coreburst-ready"
}
if [ ! -e "$BASE/.coreburst-ready" ]; then
  flock 9
  [ -e "$BASE/.coreburst-ready" ] || build_base
  flock -u 9
fi
flock -s 9
[ ${#timings[@]} -gt 0 ] || step "$SUITE machine $BASE (kept from an earlier run)"

# This run's machine: the bare one under an overlay, with the host's DNS and CA bundle.
RUN=$(mktemp -d "$CACHE/debian-$SUITE-run.XXXXXX")
ROOT=$RUN/root
cleanup() {
  local rc=$?
  end_leftovers
  # unmounted first: rm would otherwise go down the binds into the host's /dev
  umount -R "$ROOT" 2>/dev/null || umount -R -l "$ROOT" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then step "kept $RUN (upper/: what the run wrote)"
  elif mountpoint -q "$ROOT"; then step "$ROOT still mounted: $RUN left in place"
  else rm -rf --one-file-system "$RUN"; fi
  exit "$rc"
}
# Processes whose root is this run's chroot: what a step left running (a daemon a test did
# not stop). They would hold the machine's files past the run.
end_leftovers() {
  local pids=() p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && pids+=("${p#/proc/}")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  step "ending ${#pids[@]} process(es) left running in the chroot: $(for p in "${pids[@]}"; do
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-40; echo -n '; '; done)"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  sleep 2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # killed: the EXIT trap still ends the chroot's processes
mkdir -p "$RUN/upper" "$RUN/work" "$ROOT" "$CACHE/debian-$SUITE-apt-cache" "$CACHE/debian-$SUITE-pip-cache"
mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$RUN/upper,workdir=$RUN/work" "$ROOT"
mount -t proc proc "$ROOT/proc"
mount --rbind /dev "$ROOT/dev"
mount --rbind /sys "$ROOT/sys"
mount --bind "$CACHE/debian-$SUITE-apt-cache" "$ROOT/var/cache/apt/archives"
mkdir -p "$ROOT/root/.cache/pip"
mount --bind "$CACHE/debian-$SUITE-pip-cache" "$ROOT/root/.cache/pip"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
echo "127.0.0.1 localhost $(hostname)" > "$ROOT/etc/hosts"
cp "${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}" "$ROOT/etc/ssl/host-ca.crt"

# The project as CI checks it out: a clone of HEAD.
sha=$(git -C "$REPO" rev-parse HEAD)
[ -z "$(git -C "$REPO" status --porcelain)" ] ||
  step "note: uncommitted changes in $REPO are not in the run (it sees HEAD $(git -C "$REPO" log --oneline -1))"
mkdir -p "$ROOT$(dirname $PROJECT)"
timed "clone $(git -C "$REPO" rev-parse --short HEAD)" \
  sh -c 'git clone -q --no-checkout "$1" "$2" && git -C "$2" checkout -q --detach "$3"' _ "$REPO" "$ROOT$PROJECT" "$sha"

env_args=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
  CI=true TEST_WORKERS="$TEST_WORKERS" PIP_CERT=/etc/ssl/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1)
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && env_args+=("$v=${!v}")
done
step "$SUITE: $(chroot "$ROOT" /usr/bin/python3 -V), $(chroot "$ROOT" /bin/sh -c '. /etc/os-release; echo "$PRETTY_NAME"'), CI=true TEST_WORKERS=$TEST_WORKERS"
rc=0
for s in "${STEPS[@]}"; do
  step "$(head -1 <<< "$s" | cut -c1-200) (in $PROJECT)"
  timed "$s" chroot "$ROOT" /usr/bin/env -i "${env_args[@]}" /bin/bash -ec 'cd "$1"; eval "$2"' _ "$PROJECT" "$s" ||
    { rc=$?; break; }
  end_leftovers
done
summary
exit $rc
