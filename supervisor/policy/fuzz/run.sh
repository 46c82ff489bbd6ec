#!/usr/bin/env bash
# Runs each fuzz target for a bounded time, seeded with the command-policy corpus.
# Usage: supervisor/policy/fuzz/run.sh [seconds per target, default 60]
# Needs cargo-fuzz (cargo install cargo-fuzz). The machine's toolchain is stable, and
# cargo fuzz needs nightly flags: RUSTC_BOOTSTRAP=1 lets stable accept them.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
seeds="$here/corpus/command_policy"
mkdir -p "$seeds" "$here/corpus/rules"
python3 - "$here/../tests/corpus.txt" "$seeds" <<'PY'
import hashlib, sys
for l in open(sys.argv[1]):
    if l.startswith('#') or not l.strip():
        continue
    line = l.rstrip('\n').split(' ', 2)[2].replace('\\n', '\n')
    name = hashlib.sha1(line.encode()).hexdigest()[:16]
    open(f"{sys.argv[2]}/{name}", "w").write(line)
PY
printf '[[rule]]\neffect = "push_remote"\nbranch = "main"\ndecision = "deny"\n' > "$here/corpus/rules/seed"
cd "$here/../../.."
for target in command_policy rules; do
    RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir supervisor/policy/fuzz "$target" \
        "supervisor/policy/fuzz/corpus/$target" -- -max_total_time="$seconds" -max_len=4096 -timeout=10
done
