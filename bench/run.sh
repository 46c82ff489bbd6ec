#!/usr/bin/env bash
# Builds the release binaries once and runs every benchmark side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
./target/release/cc-bench supervisor
./target/release/cc-bench gate
./target/release/cc-bench paths
if command -v rg >/dev/null; then ./target/release/cc-bench search; else echo "cc-bench search skipped: rg (ripgrep) is not installed"; fi
# srt (the sandbox-runtime npm package) for the launch comparison, installed here,
# beside the build, never committed.
srt=
if command -v npm >/dev/null && npm install --silent --no-audit --no-fund --prefix target/bench-srt @anthropic-ai/sandbox-runtime >/dev/null 2>&1; then
  srt=$PWD/target/bench-srt/node_modules/.bin/srt
fi
if [ -n "$srt" ] && ! { command -v socat >/dev/null && command -v rg >/dev/null; }; then
  echo "srt needs socat and ripgrep (apt-get install -y socat ripgrep); comparing without it"
  srt=
fi
./target/release/cc-bench sandbox "$srt"
./target/release/cc-bench runs "$srt"
./target/release/cc-bench load
if [ "$(id -u)" = 0 ]; then
  ./target/release/cc-bench git
else
  echo "cc-bench git skipped: it runs git in envelopes as the service user and needs root"
fi
# srt's HTTP proxy alone (bench/srt-proxy.mjs), when the package installed above.
srt_proxy=
if [ -d target/bench-srt/node_modules/@anthropic-ai/sandbox-runtime ]; then
  srt_proxy="node bench/srt-proxy.mjs target/bench-srt/node_modules/@anthropic-ai/sandbox-runtime"
fi
./target/release/cc-bench egress "$srt_proxy"
./target/release/cc-bench adapters
./target/release/cc-bench models
./target/release/cc-bench hostile
./target/release/cc-bench terminals
# The microVM guest image beside the release binaries, with the agent.
deploy/microvm/build-image target/release/microvm target/release/cc-vm-agent
./target/release/cc-bench microvm
if [ "$(id -u)" = 0 ]; then
  ./target/release/cc-bench limits
else
  echo "cc-bench limits skipped: it makes cgroups of its own and needs root (or a delegated cgroup)"
fi
if [ "$(id -u)" = 0 ]; then
  bench/worktrees.sh
else
  echo "bench/worktrees.sh skipped: it mounts a loopback btrfs and needs root"
fi
