# Headless Chromium and its driver for the dashboard's browser tests (tests/dashboard), from
# Debian's packages; a fresh machine has neither. Sourced by .ci/run before the tests.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "installing chromium and chromium-driver (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
chromium --version 2>/dev/null | grep -v '^\s*$' || true
# The browser test saves the live roster here: the CI artefact the README shows.
export OFFLOAD_DASHBOARD_SCREENSHOT="$PWD/bench/results/dashboard-roster.png"
