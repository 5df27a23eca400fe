#!/usr/bin/env bash
# The system packages the test suite needs, installed when missing: Debian's chromium (the leaderboard page test,
# driven by playwright), podman, buildah and runc (the container runtime test), and bubblewrap and libseccomp2 (the
# sandbox that grades model-written code). As root on Debian/Ubuntu they are
# installed with apt-get; otherwise this prints the one line to run and fails, so `make test` never half-runs.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v runc >/dev/null 2>&1 || need+=(runc)
# the code-grading sandbox (esbench/tasks/sandbox.py): bubblewrap, and libseccomp for its seccomp filters
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
{ ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)
[ "${#need[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  exit 0
fi
echo "make test needs: ${need[*]} (Debian/Ubuntu: sudo apt-get install -y ${need[*]})" >&2
exit 1
