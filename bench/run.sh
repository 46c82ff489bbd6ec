#!/usr/bin/env bash
# Builds the release binaries once and runs every benchmark side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --bins
./target/release/cc-bench supervisor
if [ "$(id -u)" = 0 ]; then
  bench/worktrees.sh
else
  echo "bench/worktrees.sh skipped: it mounts a loopback btrfs and needs root"
fi
