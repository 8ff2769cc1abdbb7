#!/usr/bin/env bash
# The acceptance suite: it lives next to the repository (../shared/seed; OFFLOAD_ACCEPTANCE_RUN
# points elsewhere) and is never edited here. Some of its tests use the default data home, so it
# runs on an empty one: a ~/.hermes left on the machine by another offload (a newer ledger schema,
# say) must not decide the run.
set -euo pipefail
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
HERMES_HOME="$home" "${OFFLOAD_ACCEPTANCE_RUN:-$PWD/../shared/seed/run}" "$PWD/.venv/bin/python"
