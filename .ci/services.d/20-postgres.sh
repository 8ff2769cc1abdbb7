# PostgreSQL, the ledger's shared backend (sourced by .ci/run before the tests).
# Installs Debian's server on a fresh machine when absent, starts a throwaway cluster as the
# `postgres` user on 127.0.0.1 (.ci/postgres-up) and exports OFFLOAD_TEST_POSTGRES_DSN.
# CI fails here if the server cannot be installed or started: with CI=true the PostgreSQL tests
# would fail anyway, and this names the cause.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "installing PostgreSQL (apt-get install postgresql)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
    || { apt-get update -q >/dev/null \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; } \
    || { echo "apt-get could not install postgresql; CI needs it for the ledger tests" >&2; exit 1; }
fi
pg_env=$(.ci/postgres-up) || { echo "PostgreSQL did not start (its log is above); CI needs it" >&2; exit 1; }
eval "$pg_env"
export OFFLOAD_TEST_POSTGRES_DSN
echo "PostgreSQL up: $OFFLOAD_TEST_POSTGRES_DSN"
