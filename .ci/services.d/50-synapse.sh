# Synapse, Matrix's reference homeserver, for the gateway's Matrix tests (tests/gateway/test_matrix_*.py,
# tests/e2e/test_gateway_matrix_*.py). Sourced by .ci/run before the tests. .ci/synapse-up
# installs matrix-synapse from PyPI into its own cached venv (first run on a machine only),
# starts it on 127.0.0.1 with SQLite and registration by shared secret, and exports
# OFFLOAD_TEST_SYNAPSE_URL / _SECRET / _SERVER_NAME / _DIR. With CI=true a Matrix test fails when
# they are missing, so a failure here fails CI with its cause named.
# Measured on this 2-core machine under load: the install ~2m20s on a fresh machine (~35 s with
# pip's cache warm, nothing once the venv is cached), the start 5-10 s; the Matrix tests then
# take ~2.5 min of the test step (the SIGKILL-and-restart test ~40-60 s of it, with a Synapse of
# its own).
synapse_started_s=$SECONDS
synapse_env=$(PYTHON="${PYTHON:-python3}" .ci/synapse-up) \
  || { echo "Synapse could not be installed or started (output above); CI needs it for the Matrix tests" >&2; exit 1; }
eval "$synapse_env"
export OFFLOAD_TEST_SYNAPSE_URL OFFLOAD_TEST_SYNAPSE_SECRET OFFLOAD_TEST_SYNAPSE_SERVER_NAME OFFLOAD_TEST_SYNAPSE_DIR
echo "Synapse ready in $((SECONDS - synapse_started_s)) s: $OFFLOAD_TEST_SYNAPSE_URL"
