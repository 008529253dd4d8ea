#!/usr/bin/env bash
# WAL bytes and commits per unit of work, for one adapter run of ../shared/bench-peers (any peer), read from the
# server's counters before and after the run: pg_current_wal_lsn() and pg_stat_database of the bench database.
# Everything the run does is counted (its setup, its enqueue, its drain), so compare peers on the same scenario
# only. (Not row counts: the adapters drop their schemas, and pg_stat_user_tables forgets dropped tables.) For the
# profile of issue 12, beside the peer harness's timings; `pnpm bench` has Palisade's rows per table.
#
#   bash test/bench/peer-wal.sh <units> <adapter> <adapter args…>
#   bash test/bench/peer-wal.sh 10000 graphile-worker --scenario throughput --variant batched --concurrency 10
#   PALISADE_DIR=$PWD bash test/bench/peer-wal.sh 10000 palisade --scenario throughput --variant default --concurrency 10
#
# Needs the harness's setup (run ../shared/bench-peers/run.sh once): its peers installed, database peerbench, and,
# as root, the OS user postgres for peer authentication on the socket. PEERS_DIR names the harness when it is not
# ../shared/bench-peers beside the project.
set -euo pipefail
units="$1"; adapter="$2"; shift 2
peers="${PEERS_DIR:-$(cd "$(dirname "$0")/../../../shared/bench-peers" && pwd)}"
as=(runuser -u postgres -- env PGHOST=/var/run/postgresql PGUSER=postgres PGDATABASE=peerbench PALISADE_DIR="${PALISADE_DIR:-}")
counters() {
  "${as[@]}" psql -X -At -F ' ' -c "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,
    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())"
}
read -r wal0 xact0 < <(counters)
(cd "$peers" && "${as[@]}" node --no-deprecation "adapters/$adapter.mjs" "$@" | grep '^RESULT' || true)
sleep 2 # backends report their commit counts at exit or within a second
read -r wal1 xact1 < <(counters)
node -e '
const [units, wal, xact] = process.argv.slice(1).map(Number);
console.log(`per unit (${units}): WAL ${Math.round(wal / units)} B, commits ${(xact / units).toFixed(2)}`);
' "$units" $((wal1 - wal0)) $((xact1 - xact0))
