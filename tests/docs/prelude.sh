# Sourced before each guide's runnable blocks (see tests/tests/docs.rs and docs/README.md).
# It gives the guide what a reader of it already has: the binaries on PATH, a home (the
# guides make the checkout they work on), git's identity, and a supervisor running on its own data
# directory (CC_DATA_DIR, which ccctl and cc-supervisor both read). Everything lives in
# one temporary directory that the EXIT trap removes, after stopping that supervisor.
set -euo pipefail

: "${CC_DOCS_BIN:?set CC_DOCS_BIN to the directory holding ccctl and cc-supervisor}"
export PATH="$CC_DOCS_BIN:$PATH"

# CC_DOCS_TMP: the test names it, to read the guide's paths back as the guides spell them.
DOCS_TMP=${CC_DOCS_TMP:-$(mktemp -d)}
mkdir -p "$DOCS_TMP"
# Traversable by the service user, like a real home directory.
chmod 711 "$DOCS_TMP"
export HOME="$DOCS_TMP/home"
# The supervisor's data directory; a guide that starts its own names its own.
[ -n "${CC_DOCS_NO_SUPERVISOR:-}" ] || export CC_DATA_DIR="$DOCS_TMP/data"
mkdir -p "$HOME/src" && chmod 711 "$HOME" "$HOME/src"
export GIT_AUTHOR_NAME=Reader GIT_AUTHOR_EMAIL=reader@localhost
export GIT_COMMITTER_NAME=Reader GIT_COMMITTER_EMAIL=reader@localhost

docs_supervisor_pid=
docs_cleanup() {
    if [ -n "$docs_supervisor_pid" ]; then
        kill "$docs_supervisor_pid" 2>/dev/null || true
        wait "$docs_supervisor_pid" 2>/dev/null || true
    fi
    # A directory the test named is the test's to remove (an unprivileged guide could not).
    [ -n "${CC_DOCS_TMP:-}" ] || rm -rf "$DOCS_TMP"
}
trap docs_cleanup EXIT

# The service, as the install guide leaves it (a guide that installs its own sets
# CC_DOCS_NO_SUPERVISOR=1).
# Under the umask systemd gives a service that sets UMask=0077: the supervisor sets
# its own, so runs work whoever started it.
if [ -z "${CC_DOCS_NO_SUPERVISOR:-}" ]; then
    (umask 077 && exec cc-supervisor --log-format json 2> "$DOCS_TMP/supervisor.log") &
    docs_supervisor_pid=$!
    ccctl status --wait 30 > /dev/null
fi
cd "$HOME"

# A reader manages the installed service with systemctl; here the supervisor above
# plays it, so that the guides show what a reader types (`sudo systemctl reload
# cc-supervisor`) and it runs. tests/field/run runs the real systemctl against the
# installed package.
docs_start_supervisor() {
    # Its start-up lines go where systemd would put them: not to the reader's terminal.
    (umask 077 && exec cc-supervisor --log-format json >> "$DOCS_TMP/supervisor.log" 2>&1) &
    docs_supervisor_pid=$!
    ccctl status --wait 30 > /dev/null
}
sudo() { "$@"; }
systemctl() {
    local args="$*"
    case "${args#--user }" in
        "reload cc-supervisor") ccctl config reload > /dev/null ;;
        "restart cc-supervisor")
            kill "$docs_supervisor_pid"
            wait "$docs_supervisor_pid" || true
            docs_start_supervisor
            ;;
        *)
            echo "docs prelude: 'systemctl $args' is not played here" >&2
            return 1
            ;;
    esac
}
