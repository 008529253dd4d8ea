/**
 * The chaos suite's checker (research/fencing-semantics.md §3.2), run over the database after a scenario: the
 * audit ledger (./audit.ts, written by a trigger the suite installed, not by the engine), the `effects` rows of
 * the chaos activity (./chaos-activity.ts) and the client history the worker processes reported over IPC. It
 * never reads the engine's `attempts` or `events` tables, so it cannot inherit a bookkeeping bug.
 *
 * Every check but C-unfenced is a violation count that must be 0:
 * - C-overlap: a grant of a unit of work (a fencing scope: a run and a position, whichever step row a retry
 *   re-created there) inside the live interval of its previous grant, or a lease renewed after it expired. A
 *   grant is live until its final lease expiry, its own outcome or release, or an operator revoke; a step ended
 *   under its holder (a cancel, the run's end, a retirement) leaves the holder live until that lease expires,
 *   unless the holder was told first (its refusal cut the lease short).
 * - C-mono: grant tokens of a unit of work not strictly increasing, or one token granted twice anywhere.
 * - C-stale-fenced: a fenced effect committed after a higher token was granted for its step, after its own
 *   lease expired, or under a token never granted for that step; and, for effects fenced by a resource keyed
 *   on `ctx.info.fencing`, a lower token accepted after a higher one for the same unit of work.
 * - C-terminal: a step with other than exactly one terminal transition, or completed outside the live lease of
 *   the token it was completed under.
 * - C-ack: a completion a worker saw acknowledged (`attempt:completed`) that is not the step's recorded outcome.
 * - C-reject: a fenced write invoked after its attempt was stale (superseded or expired) that did not end in a
 *   rejection (`fail`); `staleAttempted` and `staleRejected` are the two counts (they must be equal).
 * - C-lost: a run not terminal after the heal phase.
 * - C-unfenced (reported, not asserted): unfenced effects written after their attempt was stale.
 *
 * Leases are judged in the engine's own time, as the engine judges them: every audit row records
 * `<schema>.now()` (`engine_at`) and every effect its `engine_time`, and a lease expiry is an engine time. A grant
 * overlaps when its `engine_at` falls before the previous grant's live interval ended (engine time); a fenced
 * effect is stale when its `engine_time` is at or after its token's supersession or expiry (engine time). The
 * engine's clock may jump forward (T10, test-only time travel): judged in engine time, a legitimate reclaim after
 * a jump is not an overlap, whereas on the host clock it would look like one. Engine time is also consistent with
 * the database's commit order: a claim's row change waits for any fenced transaction holding the step's row, so
 * an effect committed before a grant has an earlier `engine_time`, as long as the engine's clock only moves forward.
 *
 * The client history (C-reject) carries the workers' host-clock times; there a token's staleness is taken on the
 * host clock: the superseding grant's `clock_timestamp()`, or the host moment the engine's clock reached the
 * expiry, reconstructed from the log of clock jumps (`clock_jumps`, ./audit.ts).
 */
import type postgres from '@palisade/engine/postgres';
import type { ChildMessage, ChildMessageOf } from '../fixtures/worker-protocol.js';
import { OPERATOR_PREFIX } from './audit.js';

export const CHECKS = ['overlap', 'mono', 'staleFenced', 'terminal', 'ack', 'reject', 'lost'] as const;
export type CheckName = (typeof CHECKS)[number];

export interface CheckResult {
  /** Violations per check; each must be 0. */
  readonly violations: Record<CheckName, number>;
  /** Up to a few descriptions per check, for the failure message. */
  readonly examples: Record<CheckName, string[]>;
  /** Fenced writes invoked by stale attempts, and how many of them were rejected (must be equal). */
  readonly staleAttempted: number;
  readonly staleRejected: number;
  /** Unfenced effects written by stale attempts (zombies): reported, not asserted. */
  readonly unfencedByZombies: number;
  /** Grants (claims) per step, for "attempts per step". */
  readonly grantsPerStep: number[];
  /** Steps and runs looked at, so a vacuous pass is visible. */
  readonly steps: number;
  readonly runs: number;
  readonly fencedEffects: number;
}

/** One token's tenure of a step, reconstructed from the audit ledger. `engine…Ms` are `<schema>.now()` times. */
export interface Grant {
  readonly stepId: string;
  readonly token: bigint;
  readonly workerId: string;
  /** Host-clock ms when the grant's row change ran. */
  readonly atMs: number;
  /** Engine-clock ms when the grant's row change ran. */
  readonly engineAtMs: number;
  /** Operator revoke (worker id `operator:…`): ends the previous grant, is not itself a live grant. */
  readonly revoke: boolean;
  /** Engine-clock ms when the grant stopped being live (expiry, release, terminal, next grant's revoke). */
  engineEndMs: number;
  /** Engine-clock ms of the last lease expiry recorded for this token. */
  engineExpiryMs: number;
  /** Engine-clock ms when a higher token was granted (or revoked) for the step; Infinity if never. */
  engineSupersededMs: number;
  /** Host-clock ms of that supersession; Infinity if never. */
  supersededAtMs: number;
}

interface AuditRow {
  id: string;
  step_id: string;
  run_id: string;
  token: string | null;
  status: string;
  worker_id: string | null;
  /** Host clock (`clock_timestamp()`). */
  at_ms: number;
  /** Engine clock (`<schema>.now()`). */
  engine_ms: number;
  /** lease_expires_at (engine clock); null when unset. */
  expiry_ms: number | null;
  /** The unit of work (fencing scope) of the step. */
  scope: string | null;
  /** The step left 'running' by its own attempt's outcome or release. */
  self_ended: boolean;
  /** A heartbeat's renewal: when it was decided (engine clock), before the row trigger ran; else null. */
  heartbeat_ms: number | null;
}

/** One change of the engine clock's offset: from host-clock `atMs` on, `<schema>.now()` = host + `offsetMs`. */
export interface ClockJump {
  readonly atMs: number;
  readonly offsetMs: number;
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const MAX_EXAMPLES = 5;

/** Run every check over schema `schema`; `history` is every message of every worker process of the scenario. */
export async function checkScenario(
  sql: postgres.Sql,
  schema: string,
  history: readonly ChildMessage[],
): Promise<CheckResult> {
  const t = (name: string) => `"${schema}"."${name}"`;
  const ms = (expr: string) => `(extract(epoch from ${expr}) * 1000)::float8`;
  const audit = await sql.unsafe<AuditRow[]>(
    `SELECT id::text, step_id::text, run_id::text, fencing_token::text AS token, status, worker_id,
            ${ms('at')} AS at_ms, ${ms('engine_at')} AS engine_ms, ${ms('lease_expires_at')} AS expiry_ms,
            scope, self_ended, ${ms('heartbeat_at')} AS heartbeat_ms
       FROM ${t('audit')} a ORDER BY a.step_id, a.id`,
  );
  const effects = await sql.unsafe<
    {
      step_id: string;
      token: string;
      fenced: boolean;
      via: string;
      unit: string;
      worker_id: string;
      seq: number;
      engine_ms: number;
    }[]
  >(
    `SELECT step_id::text, fencing_token::text AS token, fenced, via, run_id::text || '/' || step_seq AS unit,
            worker_id, seq, ${ms('engine_time')} AS engine_ms
       FROM ${t('effects')} e ORDER BY e.id`,
  );
  const hostTimeOf = hostTimeOfEngine(await readClockJumps(sql, schema));
  const runs = await sql.unsafe<{ id: string; status: string }[]>(
    `SELECT id::text, status FROM ${t('runs')}`,
  );

  const violations = Object.fromEntries(CHECKS.map((c) => [c, 0])) as Record<CheckName, number>;
  const examples = Object.fromEntries(CHECKS.map((c) => [c, [] as string[]])) as Record<CheckName, string[]>;
  const violate = (check: CheckName, description: string): void => {
    violations[check]++;
    if (examples[check].length < MAX_EXAMPLES) examples[check].push(description);
  };

  // Reconstruct each step's grants, and check C-overlap, C-mono and C-terminal on the way.
  const grantsByStep = new Map<string, Grant[]>();
  const grantByKey = new Map<string, Grant>();
  const tokensSeen = new Map<string, string>();
  const terminalCount = new Map<string, number>();
  const byStep = groupBy(audit, (r) => r.step_id);
  for (const [stepId, rows] of byStep) {
    const grants: Grant[] = [];
    let current: Grant | undefined;
    let prevStatus: string | undefined;
    let prevToken: string | null = null;
    terminalCount.set(stepId, 0);
    for (const row of rows) {
      const tokenChanged = row.token !== null && row.token !== prevToken;
      if (tokenChanged) {
        const token = BigInt(row.token as string);
        const revoke = (row.worker_id ?? '').startsWith(OPERATOR_PREFIX);
        if (current) {
          if (token <= current.token) {
            violate('mono', `step ${stepId}: token ${token} granted after ${current.token}`);
          }
          current.engineSupersededMs = row.engine_ms;
          current.supersededAtMs = row.at_ms;
          if (!revoke && !current.revoke && row.engine_ms < current.engineEndMs) {
            violate(
              'overlap',
              `step ${stepId}: token ${token} granted at engine time ${iso(row.engine_ms)} while token ` +
                `${current.token} was live until ${iso(current.engineEndMs)}`,
            );
          }
          current.engineEndMs = Math.min(current.engineEndMs, row.engine_ms);
        }
        const other = tokensSeen.get(row.token as string);
        if (other !== undefined) violate('mono', `token ${row.token} granted on step ${other} and ${stepId}`);
        tokensSeen.set(row.token as string, stepId);
        const expiry = row.expiry_ms ?? row.engine_ms;
        current = {
          stepId,
          token,
          workerId: row.worker_id ?? '',
          atMs: row.at_ms,
          engineAtMs: row.engine_ms,
          revoke,
          engineEndMs: revoke ? row.engine_ms : row.status === 'running' ? expiry : row.engine_ms,
          engineExpiryMs: revoke ? row.engine_ms : expiry,
          engineSupersededMs: Infinity,
          supersededAtMs: Infinity,
        };
        grants.push(current);
        grantByKey.set(`${stepId}:${row.token}`, current);
      } else if (current && row.status === 'running' && prevStatus === 'running') {
        // Same token, still running: a heartbeat. It must not revive an expired lease (expiry is final, I4).
        if (row.expiry_ms !== null && row.expiry_ms !== current.engineExpiryMs) {
          const decidedMs = row.heartbeat_ms ?? row.engine_ms;
          if (decidedMs >= current.engineExpiryMs) {
            violate(
              'overlap',
              `step ${stepId}: token ${current.token}'s lease renewed at engine time ${iso(decidedMs)} ` +
                `after it expired at ${iso(current.engineExpiryMs)}`,
            );
          }
          if (current.engineEndMs === current.engineExpiryMs) current.engineEndMs = row.expiry_ms;
          current.engineExpiryMs = row.expiry_ms;
        }
      } else if (current && row.status !== 'running') {
        // Ended by its own outcome or release: done now. Ended under its holder (cancel, run end, retirement,
        // or a reset of such a step): the holder may run until its lease expires, or until it was told (the
        // refusal that told it cut `lease_expires_at` short, which this row records).
        const endMs = row.self_ended
          ? row.engine_ms
          : row.expiry_ms !== null
            ? Math.max(row.engine_ms, row.expiry_ms)
            : Infinity;
        current.engineEndMs = Math.min(current.engineEndMs, endMs);
      }
      if (TERMINAL.has(row.status) && !(prevStatus !== undefined && TERMINAL.has(prevStatus))) {
        terminalCount.set(stepId, (terminalCount.get(stepId) ?? 0) + 1);
        if (
          row.status === 'completed' &&
          current &&
          !current.revoke &&
          row.engine_ms >= current.engineExpiryMs
        ) {
          violate(
            'terminal',
            `step ${stepId}: completed under token ${current.token} at engine time ${iso(row.engine_ms)}, ` +
              `after its lease expired at ${iso(current.engineExpiryMs)}`,
          );
        }
        if (row.status === 'completed' && current?.revoke) {
          violate('terminal', `step ${stepId}: completed under a revoked token ${current.token}`);
        }
      }
      if (prevStatus !== undefined && TERMINAL.has(prevStatus) && !TERMINAL.has(row.status)) {
        // A terminal step left its terminal state: only an explicit retry of a failed run may do that.
        if (prevStatus === 'completed')
          violate('terminal', `step ${stepId}: left 'completed' for ${row.status}`);
        // A retried step's earlier outcome is withdrawn: it must end exactly once more.
        else terminalCount.set(stepId, (terminalCount.get(stepId) ?? 0) - 1);
      }
      prevStatus = row.status;
      prevToken = row.token ?? prevToken;
    }
    grantsByStep.set(stepId, grants);
  }
  for (const [stepId, count] of terminalCount) {
    if (count !== 1) violate('terminal', `step ${stepId}: ${count} terminal outcomes`);
  }

  // The same across the rows of one unit of work: a retry may retire a step and re-create its position as a new
  // row, and the successor there must neither be granted while an earlier row's holder is live nor take a
  // lower token (invariant 13). Grants of one row were judged above; here consecutive grants on different rows.
  const scopeOf = new Map(audit.map((r) => [r.step_id, r.scope ?? r.step_id]));
  const byScope = groupBy(
    [...grantsByStep.values()].flat().filter((g) => !g.revoke),
    (g) => scopeOf.get(g.stepId) ?? g.stepId,
  );
  for (const [scope, grants] of byScope) {
    const ordered = [...grants].sort((a, b) => a.atMs - b.atMs || (a.token < b.token ? -1 : 1));
    for (let i = 1; i < ordered.length; i++) {
      const prev = ordered[i - 1] as Grant;
      const next = ordered[i] as Grant;
      if (prev.stepId === next.stepId) continue;
      if (next.token <= prev.token) {
        violate('mono', `scope ${scope}: token ${next.token} granted after ${prev.token} (another row)`);
      }
      if (next.engineAtMs < prev.engineEndMs) {
        violate(
          'overlap',
          `scope ${scope}: token ${next.token} granted on step ${next.stepId} at engine time ` +
            `${iso(next.engineAtMs)} while token ${prev.token} of step ${prev.stepId} was live until ` +
            `${iso(prev.engineEndMs)}`,
        );
      }
    }
  }

  // When a token became stale: superseded by a higher grant, or its lease expired (whichever came first), in
  // engine time (effects) and on the host clock (the workers' client history).
  const staleSinceEngine = (g: Grant): number => Math.min(g.engineSupersededMs, g.engineExpiryMs);
  const staleSinceHost = (stepId: string, token: string): number => {
    const g = grantByKey.get(`${stepId}:${token}`);
    return g ? Math.min(g.supersededAtMs, hostTimeOf(g.engineExpiryMs)) : -Infinity;
  };

  // C-stale-fenced and C-unfenced over the effects.
  let fencedEffects = 0;
  let unfencedByZombies = 0;
  const highestByUnit = new Map<string, bigint>();
  for (const e of effects) {
    const g = grantByKey.get(`${e.step_id}:${e.token}`);
    if (e.via === 'resource') {
      // A resource keeps the highest token per scope: judged by unit of work (run, position), whatever scope
      // string the attempt handed it, no token may be accepted after a higher one.
      fencedEffects++;
      const highest = highestByUnit.get(e.unit) ?? 0n;
      const token = BigInt(e.token);
      if (token < highest) {
        violate(
          'staleFenced',
          `resource effect ${e.step_id}#${e.seq} under token ${token} accepted after token ${highest} ` +
            `for the same unit of work ${e.unit}`,
        );
      } else highestByUnit.set(e.unit, token);
      if (!g)
        violate('staleFenced', `resource effect ${e.step_id}#${e.seq} under token ${e.token}, never granted`);
    } else if (e.fenced) {
      fencedEffects++;
      if (!g || g.revoke) {
        violate('staleFenced', `fenced effect ${e.step_id}#${e.seq} under token ${e.token}, never granted`);
      } else if (e.engine_ms >= staleSinceEngine(g)) {
        violate(
          'staleFenced',
          `fenced effect ${e.step_id}#${e.seq} under token ${e.token} at engine time ${iso(e.engine_ms)}, ` +
            `stale since ${iso(staleSinceEngine(g))}`,
        );
      }
    } else if (!g || e.engine_ms >= staleSinceEngine(g)) {
      unfencedByZombies++;
    }
  }

  // C-reject: fenced writes invoked by a stale attempt must all end rejected.
  let staleAttempted = 0;
  let staleRejected = 0;
  const ops = history.filter((m): m is ChildMessageOf<'chaos:op'> => m.type === 'chaos:op');
  const outcomeOf = new Map<string, ChildMessageOf<'chaos:op'>>();
  for (const m of ops) {
    if (m.op === 'fenced-write' && m.phase !== 'invoke') outcomeOf.set(opKey(m), m);
  }
  for (const m of ops) {
    if (m.op !== 'fenced-write' || m.phase !== 'invoke') continue;
    if (m.wallMs < staleSinceHost(m.attempt.stepId, m.attempt.token)) continue;
    staleAttempted++;
    const outcome = outcomeOf.get(opKey(m));
    if (outcome?.phase === 'fail') staleRejected++;
    else {
      violate(
        'reject',
        `stale fenced write ${m.attempt.stepId}#${m.seq} by ${m.workerId} (token ${m.attempt.token}) ended ` +
          `${outcome ? `${outcome.phase}` : 'without an outcome'}`,
      );
    }
  }

  // C-ack: every acknowledged completion is the step's recorded outcome.
  const finalRows = new Map<string, AuditRow>();
  for (const row of audit) finalRows.set(row.step_id, row);
  for (const m of history) {
    if (m.type !== 'attempt:completed') continue;
    const row = finalRows.get(m.attempt.stepId);
    if (!row) continue; // a step of another activity (workflow turns are not audited)
    if (row.status !== 'completed' || row.token !== m.attempt.token) {
      violate(
        'ack',
        `step ${m.attempt.stepId}: ${m.workerId} saw token ${m.attempt.token} complete, the DB has ` +
          `${row.status} under ${row.token}`,
      );
    }
  }

  // C-lost: after the heal phase every run is terminal.
  for (const run of runs) {
    if (!TERMINAL.has(run.status)) violate('lost', `run ${run.id} is ${run.status} after the heal phase`);
  }

  return {
    violations,
    examples,
    staleAttempted,
    staleRejected,
    unfencedByZombies,
    grantsPerStep: [...grantsByStep.values()].map((g) => g.filter((x) => !x.revoke).length),
    steps: byStep.size,
    runs: runs.length,
    fencedEffects,
  };
}

/** The grants of every step, as the checker reconstructs them (scenarios use them for latencies). */
export async function readGrants(sql: postgres.Sql, schema: string, stepId: string): Promise<Grant[]> {
  const rows = await sql.unsafe<
    { token: string; worker_id: string | null; at_ms: number; engine_ms: number }[]
  >(
    `SELECT DISTINCT ON (fencing_token) fencing_token::text AS token, worker_id,
            (extract(epoch from at) * 1000)::float8 AS at_ms, (extract(epoch from engine_at) * 1000)::float8 AS engine_ms
       FROM "${schema}".audit WHERE step_id = $1 AND fencing_token IS NOT NULL ORDER BY fencing_token, id`,
    [stepId],
  );
  return rows.map((r) => ({
    stepId,
    token: BigInt(r.token),
    workerId: r.worker_id ?? '',
    atMs: r.at_ms,
    engineAtMs: r.engine_ms,
    revoke: (r.worker_id ?? '').startsWith(OPERATOR_PREFIX),
    engineEndMs: NaN,
    engineExpiryMs: NaN,
    engineSupersededMs: NaN,
    supersededAtMs: NaN,
  }));
}

/** A one-line summary of the non-zero checks, with examples. */
export function describeViolations(result: CheckResult): string {
  const lines: string[] = [];
  for (const check of CHECKS) {
    if (result.violations[check] === 0) continue;
    lines.push(`${check}: ${result.violations[check]}`, ...result.examples[check].map((e) => `  - ${e}`));
  }
  if (result.staleAttempted !== result.staleRejected) {
    lines.push(`stale fenced writes attempted ${result.staleAttempted} ≠ rejected ${result.staleRejected}`);
  }
  return lines.join('\n');
}

function opKey(m: ChildMessageOf<'chaos:op'>): string {
  return `${m.workerId}:${m.attempt.token}:${m.seq}`;
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const map = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = map.get(k);
    if (list) list.push(item);
    else map.set(k, [item]);
  }
  return map;
}

function iso(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : String(ms);
}

/**
 * The host-clock ms at which the database's lease of `token` on step `stepId` ended: the host moment the engine's
 * clock reached its last recorded expiry (clock jumps included). `undefined` if it was never running.
 */
export async function leaseExpiryMs(
  sql: postgres.Sql,
  schema: string,
  stepId: string,
  token: string,
): Promise<number | undefined> {
  const [row] = await sql.unsafe<{ expiry_ms: number | null }[]>(
    `SELECT max((extract(epoch from lease_expires_at) * 1000)::float8) AS expiry_ms
       FROM "${schema}".audit
      WHERE step_id = $1 AND fencing_token = $2::bigint AND status = 'running'`,
    [stepId, token],
  );
  if (row?.expiry_ms === null || row?.expiry_ms === undefined) return undefined;
  return hostTimeOfEngine(await readClockJumps(sql, schema))(row.expiry_ms);
}

/** Every change of the engine clock's offset, in order (the `clock_jumps` log of ./audit.ts). */
export async function readClockJumps(sql: postgres.Sql, schema: string): Promise<ClockJump[]> {
  const rows = await sql.unsafe<{ at_ms: number; offset_ms: number }[]>(
    `SELECT (extract(epoch from at) * 1000)::float8 AS at_ms, offset_ms::float8 AS offset_ms
       FROM "${schema}".clock_jumps ORDER BY id`,
  );
  return rows.map((r) => ({ atMs: r.at_ms, offsetMs: r.offset_ms }));
}

/**
 * Engine time → the first host-clock moment at which `<schema>.now()` read at least that time, given the offset
 * changes `jumps` (the offset is 0 before the first). A forward jump makes every engine time it skipped map to
 * the jump's host moment; Infinity stays Infinity.
 */
export function hostTimeOfEngine(jumps: readonly ClockJump[]): (engineMs: number) => number {
  return (engineMs) => {
    let fromMs = -Infinity;
    let offsetMs = 0;
    for (const jump of jumps) {
      const hostMs = Math.max(fromMs, engineMs - offsetMs);
      if (hostMs < jump.atMs) return hostMs;
      fromMs = jump.atMs;
      offsetMs = jump.offsetMs;
    }
    return Math.max(fromMs, engineMs - offsetMs);
  };
}
