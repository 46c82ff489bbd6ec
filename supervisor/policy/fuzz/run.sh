#!/usr/bin/env bash
# Runs each fuzz target for a bounded time, seeded with the command-policy corpus and
# host spellings.
# Usage: supervisor/policy/fuzz/run.sh [seconds per target, default 60]
# Needs cargo-fuzz (cargo install cargo-fuzz). The machine's toolchain is stable, and
# cargo fuzz needs nightly flags: RUSTC_BOOTSTRAP=1 lets stable accept them.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
seeds="$here/corpus/command_policy"
mkdir -p "$seeds" "$here/corpus/rules" "$here/corpus/egress_host"
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
# Hosts in the spellings that hide an address: numbers, IPv6 forms embedding IPv4
# (mapped, translated, NAT64), IDNA, wildcards and ports.
i=0
for host in 0x7f.1 '[::ffff:169.254.169.254]' '[::ffff:0:169.254.169.254]' '[64:ff9b::a9fe:a9fe]' \
    'bücher.example' '*.example.com:443' 127.0.0.1:8080; do
    printf '%s' "$host" > "$here/corpus/egress_host/seed$i"
    i=$((i + 1))
done
cd "$here/../../.."
for target in command_policy rules egress_host; do
    RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir supervisor/policy/fuzz "$target" \
        "supervisor/policy/fuzz/corpus/$target" -- -max_total_time="$seconds" -max_len=4096 -timeout=10
done
