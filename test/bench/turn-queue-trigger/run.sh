#!/usr/bin/env bash
# CPU of the turn_queue triggers (migration 0025) against the same writes made explicitly (STORAGE.md, step 4b):
# one backend, 300 runs x a turn cycle of three single-row statements (wake, grant, commit) per round, trigger and
# explicit interleaved. Prints µs per cycle per round and the means. Builds and drops schema turnq_cpu.
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test bash test/bench/turn-queue-trigger/run.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")"
P=(psql "${DATABASE_URL:?}" -qAt -v ON_ERROR_STOP=1)
M=../../../packages/engine/src/migrations/0025_turn-queue.sql
SETUP=$(mktemp)
trap 'rm -f "$SETUP"' EXIT
# A runs table of the columns the triggers read, then the migration's table, index, functions and triggers.
cat > "$SETUP" <<'SQL'
DROP SCHEMA IF EXISTS turnq_cpu CASCADE;
CREATE SCHEMA turnq_cpu;
CREATE TABLE turnq_cpu.runs (id uuid PRIMARY KEY, kind text NOT NULL DEFAULT 'workflow',
  status text NOT NULL DEFAULT 'running', queue text NOT NULL DEFAULT 'default', priority int NOT NULL DEFAULT 0,
  name text NOT NULL DEFAULT 'three-steps', turn_next_run_at timestamptz, turn_lease_expires_at timestamptz,
  wake_count int NOT NULL DEFAULT 0) WITH (fillfactor = 40);
SQL
python3 - "$M" >> "$SETUP" <<'PY'
import sys
parts = open(sys.argv[1]).read().split('--> statement-breakpoint')
keep = [p for p in parts if any(k in p for k in ('CREATE TABLE', 'CREATE INDEX', 'CREATE FUNCTION', 'CREATE TRIGGER'))]
print(';\n'.join(p.strip().replace('"palisade"', 'turnq_cpu') for p in keep) + ';')
print('INSERT INTO turnq_cpu.runs (id) SELECT gen_random_uuid() FROM generate_series(1, 3000);')
PY
"${P[@]}" -f "$SETUP" 2>/dev/null
"${P[@]}" -c 'VACUUM ANALYZE turnq_cpu.runs'
"${P[@]}" -f cycles.sql
for i in $(seq 0 $(( ${1:-6} - 1 ))); do
  t=$("${P[@]}" -c "SELECT round(turnq_cpu.cycle_trigger($i * 300)::numeric, 1)")
  e=$("${P[@]}" -c "ALTER TABLE turnq_cpu.runs DISABLE TRIGGER USER; SELECT round(turnq_cpu.cycle_explicit($i * 300)::numeric, 1); ALTER TABLE turnq_cpu.runs ENABLE TRIGGER USER")
  echo "$t $e"
done | awk '{ t += $1; e += $2; print "round " NR ": trigger " $1 " µs, explicit " $2 " µs per cycle" }
            END { printf "mean: trigger %.0f µs, explicit %.0f µs per cycle (%.2fx)\n", t / NR, e / NR, t / e }'
"${P[@]}" -c 'DROP SCHEMA turnq_cpu CASCADE'
