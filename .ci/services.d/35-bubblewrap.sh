# bubblewrap for the terminal sandbox's tests (terminal.sandbox: bwrap,
# tests/toolsets/test_terminal_sandbox.py), from Debian's packages; a fresh machine has none.
# Sourced by .ci/run before the tests; where it cannot be installed, those tests skip saying why.
if ! command -v bwrap >/dev/null 2>&1; then
  echo "installing bubblewrap (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } \
    || echo "apt-get could not install bubblewrap; the terminal sandbox tests will skip" >&2
fi
