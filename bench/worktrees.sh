#!/usr/bin/env bash
# Worktree provisioning on a loopback btrfs, side by side in one run: ours (reflink
# and copy backends) vs cp -a --reflink=always vs cp -a --reflink=never (a byte copy)
# vs git worktree add vs git clone --local, for generated repositories of 20,000 and
# 100,000 files with a real .git. Prints the median of 3 runs and ratios to cp --reflink.
# Needs root (it mounts its own image) and release binaries (bench/run.sh builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/target/release
sizes=${CC_BENCH_SIZES:-"20000 100000"}
runs=3

work=$(mktemp -d)
mnt=$work/mnt
mkdir "$mnt"
truncate -s 6G "$work/btrfs.img"
mkfs.btrfs -q -f "$work/btrfs.img" >/dev/null
mount -o loop "$work/btrfs.img" "$mnt"
sup=
cleanup() {
  if [ -n "$sup" ]; then kill "$sup" 2>/dev/null || true; wait "$sup" 2>/dev/null || true; fi
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

git_q() { git -c user.name=bench -c user.email=bench@example.invalid -c init.defaultBranch=main "$@"; }

# A repository of N small files in 1/100 as many directories, committed.
generate() {
  local n=$1 repo=$2
  mkdir -p "$repo"
  python3 - "$n" "$repo" <<'PY'
import os, sys
n, root = int(sys.argv[1]), sys.argv[2]
dirs = max(1, n // 100)
for i in range(n):
    d = os.path.join(root, "src", f"d{i % dirs:04d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.rs"), "w") as f:
        f.write(f"// file {i}\n" + "fn x() {}\n" * (5 + i % 50))
PY
  # No background auto-gc: it would repack (and delete loose objects) under the copies.
  git_q -C "$repo" init -q
  git_q -C "$repo" config gc.auto 0
  git_q -C "$repo" add -A
  git_q -C "$repo" commit -qm "generated"
  git_q -C "$repo" gc -q
}

# Milliseconds a command takes.
ms() {
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}

median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }

"$bin/cc-supervisor" --data-dir "$mnt/data" >/dev/null 2>&1 &
sup=$!
"$bin/ccctl" --data-dir "$mnt/data" status --wait 10 >/dev/null
ccctl() { "$bin/ccctl" --data-dir "$mnt/data" "$@"; }

for n in $sizes; do
  repo=$mnt/repo$n
  generate "$n" "$repo"
  ccctl repo add "$repo" --name "repo$n" >/dev/null
  files=$(find "$repo" -type f | wc -l)
  declare -A times=()
  for tool in ours-reflink ours-copy cp-reflink cp-bytes git-worktree git-clone-local; do
    samples=()
    for run in $(seq $runs); do
      target=$mnt/out-$tool-$run
      case $tool in
        ours-reflink) t=$(ms ccctl conversation new --repo "repo$n") ;;
        ours-copy) t=$(ms ccctl conversation new --repo "repo$n" --worktree-backend copy) ;;
        cp-reflink) t=$(ms cp -a --reflink=always "$repo" "$target") ;;
        cp-bytes) t=$(ms cp -a --reflink=never "$repo" "$target") ;;
        git-worktree) t=$(ms git_q -C "$repo" worktree add -q -b "bench-$run" "$target") ;;
        git-clone-local) t=$(ms git_q clone -q --local "$repo" "$target") ;;
      esac
      samples+=("$t")
      # Clean up outside the timing.
      case $tool in
        ours-*) for id in $(ccctl --json conversation list | python3 -c 'import json,sys; print(" ".join(c["id"] for c in json.load(sys.stdin)))'); do ccctl conversation rm "$id" >/dev/null; done ;;
        git-worktree) git_q -C "$repo" worktree remove --force "$target"; git_q -C "$repo" branch -q -D "bench-$run" ;;
        *) rm -rf "$target" ;;
      esac
      sync
    done
    times[$tool]=$(median "${samples[@]}")
  done
  base=${times[cp-reflink]}
  echo "worktree provisioning, $files files (btrfs loop image, median of $runs):"
  for tool in ours-reflink ours-copy cp-reflink cp-bytes git-worktree git-clone-local; do
    awk -v name="$tool" -v t="${times[$tool]}" -v b="$base" \
      'BEGIN { printf "  %-18s %8d ms   %6.2fx cp -a --reflink=always\n", name, t, (b > 0 ? t / b : 0) }'
  done
  unset times
done
