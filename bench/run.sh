#!/usr/bin/env bash
# Builds the release binaries once and runs every benchmark side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
# srt (the sandbox-runtime npm package) for the launch comparisons, installed here,
# beside the build, never committed; and srt's HTTP proxy alone (bench/srt-proxy.mjs).
srt_args=()
if command -v npm >/dev/null && npm install --silent --no-audit --no-fund --prefix target/bench-srt @anthropic-ai/sandbox-runtime >/dev/null 2>&1; then
  if command -v socat >/dev/null && command -v rg >/dev/null; then
    srt_args+=(--srt "$PWD/target/bench-srt/node_modules/.bin/srt")
  else
    echo "srt needs socat and ripgrep (apt-get install -y socat ripgrep); comparing launches without it"
  fi
  srt_args+=(--srt-proxy "node bench/srt-proxy.mjs target/bench-srt/node_modules/@anthropic-ai/sandbox-runtime")
fi
# The microVM guest image beside the release binaries, with the agent.
deploy/microvm/build-image target/release/microvm target/release/cc-vm-agent
# Every benchmark in turn, each in a process of its own; it fails if any one does.
# Its summary table then replaces the one in docs/performance.md (between the page's
# markers, nothing else), for the commit that records the run.
./target/release/cc-bench all "${srt_args[@]}" --summary target/bench/summary.md
./target/release/cc-bench fold-summary target/bench/summary.md docs/performance.md
if [ "$(id -u)" = 0 ]; then
  bench/worktrees.sh
else
  echo "bench/worktrees.sh skipped: it mounts a loopback btrfs and needs root"
fi
