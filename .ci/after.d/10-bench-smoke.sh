#!/usr/bin/env bash
# The benchmark smoke run: every case still runs (small N, 3 rounds, ~20 s).
set -euo pipefail
[ -d bench ] || exit 0
.venv/bin/python -m bench --quick --json "$(mktemp -d)/bench.json"
