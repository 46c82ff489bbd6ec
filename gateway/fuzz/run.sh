#!/usr/bin/env bash
# Runs each of the gateway's fuzz targets for a bounded time, seeded with real pushes.
# Usage: gateway/fuzz/run.sh [seconds per target, default 60]
# Needs cargo-fuzz; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept its flags.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$here/corpus/receive_request" "$here/corpus/report_status" "$here/corpus/route" "$here/corpus/egress_proxy" \
    "$here/corpus/model_door"
# Seeds: a push head with two refs, push options and a pack; reports with and without
# side-band.
python3 - "$here/corpus" <<'PY'
import sys
def pkt(data):
    return b"%04x" % (len(data) + 4) + data
a, b, z = b"1" * 40, b"2" * 40, b"0" * 40
caps = b"report-status side-band-64k atomic push-options agent=git/2"
head = pkt(a + b" " + b + b" refs/heads/main\0" + caps + b"\n") + pkt(z + b" " + b + b" refs/heads/x\n") + b"0000"
open(sys.argv[1] + "/receive_request/seed", "wb").write(head + pkt(b"ci.skip") + b"0000PACK")
report = pkt(b"unpack ok\n") + pkt(b"ok refs/heads/main\n") + pkt(b"ng refs/heads/x no\n") + b"0000"
open(sys.argv[1] + "/report_status/plain", "wb").write(report)
open(sys.argv[1] + "/report_status/side-band", "wb").write(pkt(b"\x02progress\n") + pkt(b"\x01" + report) + b"0000")
open(sys.argv[1] + "/route/advertise", "wb").write(b"GET\n/octo/project.git/info/refs\nservice=git-receive-pack")
open(sys.argv[1] + "/route/push", "wb").write(b"POST\n/octo/project/git-receive-pack\n")
for i, start in enumerate([b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n",
                           b"GET http://example.test/a?b HTTP/1.1\r\nHost: example.test\r\n\r\n",
                           b"\x05\x01\x00\x03\x10api.example.test\x01\xbb", b"\x05\x02\x00\x02"]):
    open(sys.argv[1] + "/egress_proxy/seed%d" % i, "wb").write(start)
open(sys.argv[1] + "/model_door/sse", "wb").write(
    b"POST /anthropic/v1/messages?beta=true\0event: message_start\ndata: {\"type\":\"message_start\",\"message\":"
    b"{\"model\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n")
open(sys.argv[1] + "/model_door/json", "wb").write(
    b"POST /local/chat/completions\0{\"model\":\"g\",\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}")
PY
cd "$here/../.."
for target in receive_request report_status route egress_proxy model_door; do
    RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir gateway/fuzz "$target" \
        "gateway/fuzz/corpus/$target" -- -max_total_time="$seconds" -max_len=8192 -timeout=10
done
