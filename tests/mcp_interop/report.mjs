// What a client script saw, printed as one JSON line on stdout (the pytest side reads the last one).
export const seen = { protocol: null, checks: [] };

// Record a check; on failure print the report with what failed and exit 1.
export function check(ok, what, detail) {
  seen.checks.push(what);
  if (!ok) {
    console.log(JSON.stringify({ ...seen, failed: what, detail }));
    process.exit(1);
  }
}

export function done() {
  console.log(JSON.stringify({ ...seen, ok: true }));
}
