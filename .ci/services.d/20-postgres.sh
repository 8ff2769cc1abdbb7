# PostgreSQL, the ledger's shared backend (sourced by .ci/run before the tests).
# Installs Debian's server on a fresh machine when absent, starts a throwaway cluster as the
# `postgres` user on 127.0.0.1 (.ci/postgres-up) and exports OFFLOAD_TEST_POSTGRES_DSN.
# CI fails here if the server cannot be installed or started: with CI=true the PostgreSQL tests
# would fail anyway, and this names the cause.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "installing PostgreSQL (apt-get install postgresql)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
    || { apt-get update -q >/dev/null \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
fi
eval "$(.ci/postgres-up)"
export OFFLOAD_TEST_POSTGRES_DSN
echo "PostgreSQL up: $OFFLOAD_TEST_POSTGRES_DSN"
