#!/usr/bin/env bash
# The whole suite, from a fresh Debian machine: installs what is missing
# (redis-server), then runs formatting, lints, every test (the integration
# tests start real redis-server processes on loopback) and the docs build.
#
# Usage: scripts/test.sh            (from anywhere in the repository)
# Env:   QUORUM_LOCK_TORTURE_SECS   run the torture test longer (see docs/safety.md)
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "==> redis-server not found: installing it (Debian package redis-server)"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq redis-server >/dev/null
  # The package starts a system instance on 6379; the tests use their own
  # servers on free ports, so stop it to keep the machine quiet.
  as_root service redis-server stop >/dev/null 2>&1 || true
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust from https://rustup.rs (stable)" >&2
  exit 1
fi
redis-server --version

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy --all-targets --all-features -- -D warnings"
cargo clippy --all-targets --all-features -- -D warnings

echo "==> cargo test --all-features"
# Two test threads: the machine has two cores, shared with the redis-servers.
cargo test --all-features -- --test-threads=2

echo "==> cargo clippy -p quorum-lock-bench (the comparison benchmark still builds)"
cargo clippy -p quorum-lock-bench --all-targets -- -D warnings

echo "==> the command-line tool: clippy and its tests (the real binary on real servers)"
cargo clippy -p quorum-lock-cli --all-targets -- -D warnings
cargo test -p quorum-lock-cli -- --test-threads=2

echo "==> cargo clippy --no-default-features (memory backend only)"
cargo clippy --no-default-features --all-targets -- -D warnings

echo "==> cargo test --no-default-features (memory backend only)"
cargo test --no-default-features --lib --tests -- --test-threads=2

echo "==> cargo doc --no-deps"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

echo "==> all checks passed"
