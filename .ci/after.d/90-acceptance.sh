#!/usr/bin/env bash
# The acceptance suite: it lives next to the repository (../shared/seed; OFFLOAD_ACCEPTANCE_RUN
# points elsewhere) and is never edited here.
set -euo pipefail
"${OFFLOAD_ACCEPTANCE_RUN:-$PWD/../shared/seed/run}" "$PWD/.venv/bin/python"
