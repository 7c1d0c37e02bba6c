#!/usr/bin/env bash
# .ci/slurm-chroot.sh RELEASE [PYTEST ARGS... | --run COMMAND... | --build]: the tests that
# start a real Slurm (pytest marker `slurm`, tests/conftest.py) against Slurm RELEASE (22.05,
# 24.11 or 26.05); `make test-slurm SLURM=RELEASE` runs it. --run: a command instead (from the
# working tree, e.g. recording fixtures); --build: only build the chroot (.ci/run builds the
# other releases' while `make test` runs).
#
# The host's own Slurm where its release is RELEASE (Debian 12: 22.05), with the project's .venv
# (COREBURST_SLURM_CHROOT=1: a chroot all the same).
# Otherwise Debian's packages of that release in a minbase chroot (22.05: bookworm, 24.11:
# trixie, 26.05: sid), built with debootstrap and kept between runs under
# $COREBURST_SLURM_CACHE (/var/cache/coreburst), with a virtual environment of the chroot's own
# python3 holding this project (editable, from the working tree bound at /src) and only what
# the Slurm tests import.
# The tests run inside the chroot, in a private mount namespace (/proc, /dev, /sys and the
# working tree bound in; nothing left mounted afterwards) and a private network namespace with
# loopback only: every daemon of the lab listens on 127.0.0.1 there.
#
# Cache keys: the chroot by its release, its package list and RECIPE below; the virtual
# environment by pyproject.toml and the requirement list. A key that changes builds afresh
# (the old directory stays until removed: `rm -rf /var/cache/coreburst/slurm-*`).
#
# Needs root, debootstrap (apt-get install -y debootstrap), unshare and chroot (util-linux,
# coreutils) and Debian's mirror (DEBIAN_MIRROR) while building; nothing from the network
# while the tests run. Prints how long each step took.
set -euo pipefail
{ # read whole before it runs: an edit to this file cannot break a run in progress
REPO=$(cd "$(dirname "$0")/.." && pwd)
RELEASE=${1:?usage: $0 22.05|24.11|26.05 [pytest args... | --run command... | --build]}
shift
CACHE=${COREBURST_SLURM_CACHE:-/var/cache/coreburst}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORKERS=${TEST_WORKERS:-4}
RECIPE=1  # bump when the build steps below change what a chroot holds
PACKAGES="slurmctld slurmd slurmdbd slurm-client munge mariadb-server mariadb-client prometheus
 iproute2 procps python3 python3-venv ca-certificates"
# What the Slurm tests and the lab import beyond the base: the guardrails extra (the daemon's
# rules, boto3), tco (the core report's --plot) and these of the dev extra, at pyproject.toml's
# bounds. Not Pulumi, Ansible, mypy or the linters: they are what makes .[dev] slow to install.
EXTRAS=guardrails,tco
DEV_PICK="pytest pytest-timeout pytest-xdist moto psutil setuptools"
# The test files that can hold a `slurm` test: those naming the lab or its fixtures (collecting
# the others would import what this environment leaves out, e.g. parliament); -m slurm then
# selects by the marker, which tests/conftest.py gives.
mapfile -t FILES < <(cd "$REPO" && grep -rlE --include='test_*.py' \
  'coreburst\.sandbox(\.| import )(slurmlab|slurmdb|burst_demo)|\b(burst_lab|slurm_lab)\b' \
  tests/integration | sort)
PYTEST_ARGS=(-q -p no:cacheprovider -m slurm -n "$WORKERS" --dist loadfile --no-loadscope-reorder
  "${FILES[@]}")
RUN=()
BUILD_ONLY=
if [ "${1:-}" = --run ]; then RUN=("${@:2}")  # a command instead of pytest (recording fixtures)
elif [ "${1:-}" = --build ]; then BUILD_ONLY=1  # build (or find) the chroot, run nothing
elif [ $# -gt 0 ]; then PYTEST_ARGS=(-q -p no:cacheprovider -m slurm "$@"); fi

t0=$SECONDS
step() { echo "slurm-chroot: [$((SECONDS - t0))s] $*"; }
die() { echo "slurm-chroot: $*" >&2; exit 2; }

host_release=$(slurmctld -V 2>/dev/null | awk '{print $2}' | cut -d. -f1,2 || true)
[ -z "${COREBURST_SLURM_CHROOT:-}" ] || host_release=  # a chroot even for the host's release
if [ "$host_release" = "$RELEASE" ] && [ -n "$BUILD_ONLY" ]; then
  step "Slurm $RELEASE is the host's: no chroot to build"; exit 0
elif [ "$host_release" = "$RELEASE" ]; then
  step "Slurm $RELEASE is the host's ($(slurmctld -V)): running on the host"
  cd "$REPO"
  PY=${PYTHON:-$REPO/.venv/bin/python}
  [ -x "$PY" ] || die "no $PY: run make setup first"
  rc=0
  if [ ${#RUN[@]} -gt 0 ]; then PATH=$(dirname "$PY"):$PATH "${RUN[@]}" || rc=$?
  else "$PY" -m pytest "${PYTEST_ARGS[@]}" || rc=$?; fi
  step "done (rc=$rc)"; exit $rc
fi

case $RELEASE in
  22.05) SUITE=bookworm ;;
  24.11) SUITE=trixie ;;
  26.05) SUITE=sid ;;
  *) die "no chroot recipe for Slurm $RELEASE (the host has ${host_release:-none}): 22.05, 24.11 or 26.05" ;;
esac
[ "$(id -u)" = 0 ] || die "needs root (chroot, namespaces, the lab's slurmd)"
for tool in debootstrap unshare chroot flock; do
  command -v $tool >/dev/null || die "$tool missing (apt-get install -y debootstrap util-linux)"
done

sys_key=$(printf '%s\n' "$SUITE" "$PACKAGES" "$RECIPE" | sha256sum | cut -c1-12)
ROOT=$CACHE/slurm-$SUITE-$sys_key
mkdir -p "$CACHE"
exec 9>"$CACHE/slurm-$SUITE.lock"
flock 9  # one build or run of a chroot at a time

# Run CMD inside the chroot in a private mount namespace (mounts vanish with it). NET=host keeps
# the host's network (building); otherwise a private one with loopback only.
in_root() {
  local unshare_args=(--mount --propagation private)
  [ "${NET:-}" = host ] || unshare_args+=(--net)
  unshare "${unshare_args[@]}" -- /bin/bash -euc '
    root=$1; repo=$2; shift 2
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    mkdir -p "$root/src"; mount --bind "$repo" "$root/src"
    exec chroot "$root" "$@"' _ "$ROOT" "$REPO" "$@"
}

apt_opts=()
[ $SUITE = sid ] && apt_opts=(-o Acquire::Check-Valid-Until=false)
if [ ! -e "$ROOT/.coreburst-system" ]; then
  if [ ! -e "$ROOT/.coreburst-base" ]; then
    rm -rf "$ROOT"
    step "debootstrap $SUITE into $ROOT (cold: a few minutes)"
    debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" > "$CACHE/debootstrap-$SUITE.log" 2>&1 ||
      { tail -20 "$CACHE/debootstrap-$SUITE.log"; die "debootstrap failed"; }
    touch "$ROOT/.coreburst-base"
  fi
  step "apt-get install in the $SUITE chroot"
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"  # no service starts
  chmod 755 "$ROOT/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # shellcheck disable=SC2086
  NET=host in_root /usr/bin/env DEBIAN_FRONTEND=noninteractive /bin/bash -ec "
    apt-get ${apt_opts[*]} update -qq
    apt-get install -y -qq --no-install-recommends $(echo $PACKAGES)
    apt-get clean" > "$CACHE/apt-$SUITE.log" 2>&1 ||
    { tail -30 "$CACHE/apt-$SUITE.log"; die "apt-get install failed"; }
  touch "$ROOT/.coreburst-system"
fi
echo "127.0.0.1 localhost $(hostname)" > "$ROOT/etc/hosts"

# The virtual environment: the chroot's python3, this project editable from /src.
reqs=$(python3 - "$REPO/pyproject.toml" "$DEV_PICK" <<'EOF'
import re, sys, tomllib
dev = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["dev"]
pick = set(sys.argv[2].split())
print("\n".join(r for r in dev if re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0] in pick))
EOF
)
py_key=$(printf '%s\n' "$EXTRAS" "$reqs" | cat - "$REPO/pyproject.toml" | sha256sum | cut -c1-12)
VENV=/opt/coreburst-venv
if [ "$(cat "$ROOT$VENV/.coreburst-key" 2>/dev/null)" != "$py_key" ]; then
  step "virtual environment $VENV in the chroot: .[$EXTRAS] and $(echo $DEV_PICK | tr ' ' ,)"
  rm -rf "${ROOT:?}$VENV"
  printf '%s\n' "$reqs" > "$ROOT/tmp/coreburst-dev-reqs.txt"
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # the host's CA bundle: where PyPI is reached through a proxy of its own CA, the host trusts it
  cp "${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}" "$ROOT/tmp/host-ca.crt"
  # (--no-build-isolation: setuptools comes with the requirements, and pip's isolated build
  # environment would fetch it again)
  # (every variable that names a CA bundle: pip 23.0 of bookworm took REQUESTS_CA_BUNDLE, which
  # named the chroot's own bundle)
  NET=host PIP_CERT=/tmp/host-ca.crt SSL_CERT_FILE=/tmp/host-ca.crt \
    REQUESTS_CA_BUNDLE=/tmp/host-ca.crt CURL_CA_BUNDLE=/tmp/host-ca.crt in_root /bin/bash -ec "
    python3 -m venv $VENV
    $VENV/bin/pip install -q --upgrade pip
    $VENV/bin/pip install -q -r /tmp/coreburst-dev-reqs.txt
    $VENV/bin/pip install -q --no-build-isolation -e '/src[$EXTRAS]'" \
    > "$CACHE/venv-$SUITE.log" 2>&1 || { tail -30 "$CACHE/venv-$SUITE.log"; die "pip install failed"; }
  echo "$py_key" > "$ROOT$VENV/.coreburst-key"
fi
step "chroot ready: $(in_root /usr/sbin/slurmctld -V), $(in_root $VENV/bin/python -V)"
[ -z "$BUILD_ONLY" ] || exit 0

# The tests, in the chroot, on loopback only. CI and TEST_* pass through.
env_args=(HOME=/root PATH=$VENV/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
for v in CI TEST_WORKERS; do [ -n "${!v:-}" ] && env_args+=("$v=${!v}"); done
[ ${#RUN[@]} -gt 0 ] || RUN=(python -m pytest "${PYTEST_ARGS[@]}")
step "${RUN[*]} (Slurm $RELEASE, $SUITE chroot, loopback only)"
rc=0
in_root /usr/bin/env -i "${env_args[@]}" /bin/bash -ec '
  ip link set lo up
  ip addr add 127.0.0.2/32 dev lo 2>/dev/null || true
  cd /src
  exec "$@"' _ "${RUN[@]}" || rc=$?
step "done (rc=$rc)"
exit $rc
}
