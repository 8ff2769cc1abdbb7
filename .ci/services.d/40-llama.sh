# llama.cpp's llama-server and a small GGUF model, for the real-server tests (tests/realserver).
# Sourced by .ci/run before the tests. The first run on a machine compiles llama-server from the
# llama-cpp-python sdist (~12-15 min on 2 cores; .ci/llama-up installs cmake/build-essential with
# apt when missing); later runs reuse the build cached under ~/.cache/offload/llama/. Exports
# OFFLOAD_TEST_LLAMA_SERVER and OFFLOAD_TEST_LLAMA_MODEL; with CI=true a test that needs them fails
# when they are missing, so a failure here fails CI with its cause named.
llama_started_s=$SECONDS
llama_env=$(PYTHON="${PYTHON:-python3}" .ci/llama-up) \
  || { echo "llama-server could not be built or the model fetched (output above); CI needs them" >&2; exit 1; }
eval "$llama_env"
export OFFLOAD_TEST_LLAMA_SERVER OFFLOAD_TEST_LLAMA_MODEL
echo "llama-server ready in $((SECONDS - llama_started_s)) s: $OFFLOAD_TEST_LLAMA_SERVER"
