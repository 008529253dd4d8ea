import type { AttemptDescription, EventDescription, RunDetails, WatchedEvent } from '../index.js';
import {
  compactJson,
  elide,
  formatClock,
  formatDuration,
  formatFailure,
  formatTimestamp,
  msBetween,
  paint,
  statusStyle,
  table,
  truncate,
  wrap,
  type Row,
  type Style,
  type Terminal,
} from './format.js';

/** What `runs show` prints: a run's details (turn attempts included). */
export type RunTimeline = RunDetails;

const INDENT = '  ';

/**
 * How many attempts and events `runs show` prints from the start and from the end of a long list without `--all`
 * (a 240-step run has hundreds of each); the line between says how many it left out.
 */
export const SHOWN_HEAD = 20;
export const SHOWN_TAIL = 10;

interface Lookup {
  label(stepId: string | null, eventType?: string): string;
}

function lookup(t: RunTimeline): Lookup {
  const labels = new Map(t.steps.map((s) => [s.id, `${s.name}#${s.seq}${s.retiredAt ? ' (retired)' : ''}`]));
  return {
    label: (stepId, eventType) =>
      stepId === null
        ? eventType?.startsWith('run:')
          ? 'run'
          : 'turn'
        : (labels.get(stepId) ?? stepId.slice(0, 8)),
  };
}

function data(e: EventDescription): Record<string, unknown> {
  return e.data !== null && typeof e.data === 'object' ? (e.data as Record<string, unknown>) : {};
}

const text = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'bigint' ? String(v) : undefined;

interface StaleRejection {
  readonly operation: string;
  readonly staleToken: string;
  readonly currentToken: string;
  readonly reason: string | undefined;
}

function staleRejection(e: EventDescription): StaleRejection {
  const d = data(e);
  return {
    operation: text(d.operation) ?? 'write',
    staleToken: text(d.staleToken) ?? e.token ?? '?',
    currentToken: text(d.currentToken) ?? 'none',
    reason: text(d.reason),
  };
}

/**
 * `stale token 41 · current token 57 · epoch 2 · host:41:ab12cd34` (the rejected writer): the tokens first, so
 * that cutting the line to the terminal's width never loses them.
 */
function staleDetails(e: EventDescription, r: StaleRejection): string {
  return [
    `stale token ${r.staleToken}`,
    `current token ${r.currentToken}`,
    e.epoch !== null ? `epoch ${e.epoch}` : '',
    e.workerId ?? '',
  ]
    .filter(Boolean)
    .join(' · ');
}

function eventDetails(e: EventDescription, reference: Date): string {
  if (e.type === 'attempt:stale-rejected') {
    const r = staleRejection(e);
    // Both tokens first and compact, so that cutting the line to the terminal's width keeps them.
    return [`stale ${r.staleToken} → current ${r.currentToken}`, `${r.operation} rejected`, r.reason ?? '']
      .filter(Boolean)
      .join(' · ');
  }
  const d = data(e);
  if (e.type === 'run:progress') return compactJson(d.value, 400);
  const parts: string[] = [];
  if (e.epoch !== null) parts.push(`epoch ${e.epoch}`);
  if (e.token !== null) parts.push(`token ${e.token}`);
  // A claim's lease, under its own name (not a due time), before the worker id that a cut to the width may lose.
  const leaseUntil = text(d.leaseExpiresAt);
  if (leaseUntil) parts.push(`lease until ${formatClock(leaseUntil, reference)}`);
  if (e.workerId && e.type === 'attempt:claimed') parts.push(e.workerId);
  const failure = formatFailure(d.error);
  if (failure) parts.push(failure);
  for (const key of ['reason', 'why', 'workflow'] as const) {
    const v = text(d[key]);
    if (v) parts.push(v);
  }
  if (text(d.retryAt)) parts.push(`retry at ${formatClock(text(d.retryAt) ?? null, reference)}`);
  if (text(d.dueAt)) parts.push(`due at ${formatClock(text(d.dueAt) ?? null, reference)}`);
  return parts.join(' · ');
}

function attemptOutcome(a: AttemptDescription): string {
  return a.outcome ?? (a.endedAt === null ? 'running' : 'ended');
}

/**
 * The failure recorded for the attempt holding `token` (its `attempt:failed` / `step:failed` event), if any, its
 * message whole.
 */
function failureOf(events: readonly EventDescription[], token: string): string | undefined {
  for (const e of events) {
    if (e.token !== token || e.type === 'attempt:stale-rejected') continue;
    const f = formatFailure(data(e).error, true);
    if (f) return f;
  }
  return undefined;
}

/**
 * Every attempt of the run, steps' and turns', in claim order (tokens only grow), each with its failure in full
 * (wrapped); without `all` a long list keeps its first and last attempts and says how many it left out.
 */
function attemptRows(t: RunTimeline, names: Lookup, all: boolean): Row[] {
  const reference = t.run.createdAt;
  const attempts = [...t.turns, ...t.steps.flatMap((s) => s.attempts)].sort((a, b) =>
    BigInt(a.token) < BigInt(b.token) ? -1 : BigInt(a.token) > BigInt(b.token) ? 1 : 0,
  );
  const groups: Row[][] = [];
  for (const a of attempts) {
    const rows: Row[] = [];
    groups.push(rows);
    const outcome = attemptOutcome(a);
    rows.push([
      a.stepId === null ? { text: 'turn', style: 'dim' } : names.label(a.stepId),
      String(a.epoch),
      String(a.attempt),
      a.token,
      a.workerId,
      { text: outcome, style: statusStyle(outcome === 'running' ? null : outcome) },
      formatClock(a.claimedAt, reference),
      formatDuration(a.durationMs),
    ]);
    const failure = outcome === 'completed' ? undefined : failureOf(t.events, a.token);
    if (failure) rows.push({ note: `↳ ${failure}`, style: 'dim' });
  }
  for (const s of t.steps.filter((s) => s.attempts.length === 0)) {
    groups.push([
      [names.label(s.id), '', '', '', '', { text: s.status, style: statusStyle(s.status) }, '—', '—'],
    ]);
  }
  const shown = elide(groups, { head: SHOWN_HEAD, tail: SHOWN_TAIL, all });
  const omitted: Row[] =
    shown.omitted > 0
      ? [{ note: `… ${shown.omitted} more attempts (use --all to show every one)`, style: 'dim' }]
      : [];
  return [...shown.head.flat(), ...omitted, ...shown.tail.flat()];
}

/** What the sections of `runs show` share: the terminal, the run, its step labels, and the lines so far. */
interface Sheet {
  readonly term: Terminal;
  readonly t: RunTimeline;
  readonly names: Lookup;
  /** The run's creation: clocks on the same day print without their date. */
  readonly reference: Date;
  readonly width: number;
  /** Print long lists whole (`--all`). */
  readonly all: boolean;
  readonly lines: string[];
}

/** The run's fields: id, name, status, queue, times, limits, links, input, output, error, unclaimed work. */
function headerLines(s: Sheet, nowIso: string): void {
  const { term, t, width, lines } = s;
  const { run } = t;
  // `key value`, the value cut to the width (ids, names and idempotency keys can be long).
  const field = (key: string, value: string, style?: Style) =>
    `${paint(term, 'dim', key.padEnd(9))} ${paint(term, style, truncate(value, width - 10))}`;

  lines.push(field('run', run.id, 'bold'));
  lines.push(field('name', `${run.name} (${run.kind === 'workflow' ? 'workflow' : 'activity'} run)`));
  lines.push(field('status', run.status, statusStyle(run.status)));
  lines.push(
    field(
      'queue',
      [run.queue, `priority ${run.priority}`, run.idempotencyKey ? `key ${run.idempotencyKey}` : '']
        .filter(Boolean)
        .join(' · '),
    ),
  );
  lines.push(field('created', `${formatTimestamp(run.createdAt, true)} UTC`));
  if (run.startAt) lines.push(field('starts', `${formatTimestamp(run.startAt, true)} UTC (a delayed start)`));
  if (run.startedAt) lines.push(field('started', `${formatTimestamp(run.startedAt, true)} UTC`));
  if (run.finishedAt) {
    const took = formatDuration(msBetween(run.startedAt ?? run.createdAt, run.finishedAt));
    lines.push(field('finished', `${formatTimestamp(run.finishedAt, true)} UTC · took ${took}`));
  } else if (run.startedAt) {
    lines.push(field('running', `for ${formatDuration(msBetween(run.startedAt, nowIso))}`));
  }
  const limits = flowLimits(
    run.concurrency ?? t.steps[0]?.concurrency ?? null,
    t.steps[0]?.rateLimit ?? null,
  );
  if (limits) lines.push(field('limits', limits));
  if (run.cancelReason) lines.push(field('cancel', run.cancelReason));
  if (run.parentRunId) lines.push(field('parent', `${run.parentRunId} (it started this run)`));
  if (run.scheduleId) {
    const tick = run.scheduleTickAt ? `${formatTimestamp(run.scheduleTickAt, true)} UTC` : 'unknown';
    lines.push(field('schedule', `${run.scheduleId} · tick ${tick}`));
  }
  lines.push(field('input', compactJson(run.input, width - 10)));
  if (run.output !== null && run.output !== undefined)
    lines.push(field('output', compactJson(run.output, width - 10)));
  if (run.progress !== null && run.progress !== undefined)
    lines.push(field('progress', compactJson(run.progress, width - 10)));
  // The run's error whole, wrapped: its end is often what says why.
  const runError = formatFailure(run.error, true);
  if (runError) {
    const [first = '', ...rest] = wrap(runError, width - 10);
    lines.push(
      field('error', first, 'red'),
      ...rest.map((part) => ' '.repeat(10) + paint(term, 'red', part)),
    );
  }
  for (const u of t.unclaimed ?? []) {
    const what = `${u.kind} ${u.name} on queue ${u.queue} due for ${formatDuration(u.dueForMs)}, never claimed: is a worker serving it?`;
    lines.push(field('waiting', what, 'yellow'));
  }
}

/** ATTEMPTS: every attempt of the run, steps' and turns', in claim order. */
function attemptLines(s: Sheet): void {
  const { term, t, names, all, lines } = s;
  const attempts = attemptRows(t, names, all);
  const count = t.turns.length + t.steps.reduce((n, s) => n + s.attempts.length, 0);
  lines.push('', paint(term, 'bold', `ATTEMPTS (${count})`));
  if (attempts.length === 0) lines.push(INDENT + paint(term, 'dim', 'none yet'));
  else {
    lines.push(
      ...table(
        term,
        [
          { header: 'STEP', shrink: 'end', minWidth: 8 },
          { header: 'EPOCH', align: 'right' },
          { header: 'ATT', align: 'right' },
          { header: 'TOKEN', align: 'right' },
          { header: 'WORKER', shrink: 'middle', minWidth: 12 },
          { header: 'OUTCOME' },
          { header: 'CLAIMED (UTC)' },
          { header: 'DURATION', align: 'right' },
        ],
        attempts,
        INDENT,
      ),
    );
  }
}

/** REJECTED STALE WRITES: each with the stale and the current token. */
function staleWriteLines(s: Sheet): void {
  const { term, t, names, reference, width, lines } = s;
  const stale = t.events.filter((e) => e.type === 'attempt:stale-rejected');
  lines.push('', paint(term, 'bold', `REJECTED STALE WRITES (${stale.length})`));
  if (stale.length === 0) lines.push(INDENT + paint(term, 'dim', 'none'));
  for (const e of stale) {
    const r = staleRejection(e);
    const head = `${formatClock(e.at, reference)}  ${names.label(e.stepId, e.type)}  `;
    const room = Math.max(20, width - INDENT.length - head.length);
    const what = `${r.operation} rejected${r.reason ? ` (${r.reason})` : ''}`;
    lines.push(INDENT + head + paint(term, 'red', truncate(what, room)));
    lines.push(INDENT + ' '.repeat(head.length) + truncate(staleDetails(e, r), room));
  }
}

/** SIGNALS (workflow runs only): each with who took it, or why none will. */
function signalLines(s: Sheet): void {
  const { term, t, names, reference, width, lines } = s;
  const { run } = t;
  // Signals only for workflow runs (an activity run cannot take one).
  const signals = t.signals ?? [];
  if (run.kind === 'workflow') {
    const pending = signals.filter((g) => g.consumedAt === null).length;
    lines.push(
      '',
      paint(term, 'bold', `SIGNALS (${signals.length}${pending > 0 ? `, ${pending} pending` : ''})`),
    );
    if (signals.length === 0) lines.push(INDENT + paint(term, 'dim', 'none'));
    for (const g of signals) {
      const head = `${formatClock(g.receivedAt, reference)}  #${g.id}  ${g.name}  `;
      const taken =
        g.undelivered?.reason === 'invalid-payload'
          ? paint(term, 'red', `refused by the wait #${g.undelivered.seq} (payload does not fit its schema)`)
          : g.undelivered?.reason === 'run-ended'
            ? paint(term, 'yellow', `undelivered: the run ${g.undelivered.status} first`)
            : g.stepId === null
              ? paint(term, 'yellow', 'pending')
              : `taken by ${names.label(g.stepId)} at ${formatClock(g.consumedAt, reference)}`;
      const room = Math.max(10, width - INDENT.length - head.length - visibleText(taken).length - 2);
      lines.push(INDENT + head + taken + '  ' + compactJson(g.payload, room));
    }
  }
}

/** CHILDREN: the runs this one started, when it started any. */
function childLines(s: Sheet): void {
  const { term, t, reference, width, lines } = s;
  const children = t.children ?? [];
  if (children.length > 0) {
    lines.push('', paint(term, 'bold', `CHILDREN (${children.length})`));
    for (const c of children) {
      const head = `${formatClock(c.createdAt, reference)}  ${c.id}  `;
      const status = paint(term, statusStyle(c.status), c.status);
      const what = truncate(`${c.name}${c.seq !== null ? ` (step ${c.seq})` : ''}`, Math.max(10, width - 70));
      lines.push(INDENT + head + status + '  ' + what);
    }
  }
}

/** EVENTS: the history, its first and last entries unless `all`. */
function eventLines(s: Sheet): void {
  const { term, t, names, reference, width, all, lines } = s;
  lines.push('', paint(term, 'bold', `EVENTS (${t.events.length})`));
  const typeWidth = Math.min(22, Math.max(0, ...t.events.map((e) => e.type.length)));
  const labelWidth = Math.min(16, Math.max(0, ...t.events.map((e) => names.label(e.stepId, e.type).length)));
  const shown = elide(t.events, { head: SHOWN_HEAD, tail: SHOWN_TAIL, all });
  const omitted = INDENT + paint(term, 'dim', `… ${shown.omitted} more events (use --all to show every one)`);
  for (const e of [...shown.head, ...(shown.omitted > 0 ? [undefined] : []), ...shown.tail]) {
    if (e === undefined) {
      lines.push(omitted);
      continue;
    }
    const clock = formatClock(e.at, reference);
    const label = truncate(names.label(e.stepId, e.type), labelWidth).padEnd(labelWidth);
    const type = truncate(e.type, typeWidth).padEnd(typeWidth);
    const head = `${clock}  ${type}  ${label}  `;
    const details = truncate(eventDetails(e, reference), Math.max(10, width - INDENT.length - head.length));
    const style = e.type === 'attempt:stale-rejected' ? 'red' : undefined;
    lines.push((INDENT + `${clock}  ${paint(term, style, type)}  ${label}  ${details}`).trimEnd());
  }
}

/** The text of `palisade runs show`: header, every attempt, every rejected stale write, the event history. */
export function formatRunTimeline(
  term: Terminal,
  t: RunTimeline,
  options: { nowIso: string; events: boolean; all?: boolean },
): string[] {
  const s: Sheet = {
    term,
    t,
    names: lookup(t),
    reference: t.run.createdAt,
    width: term.width,
    all: options.all === true,
    lines: [],
  };
  headerLines(s, options.nowIso);
  attemptLines(s);
  staleWriteLines(s);
  signalLines(s);
  childLines(s);
  if (options.events) eventLines(s);
  return s.lines;
}

/**
 * One line of `palisade runs watch`: `clock  type  step  details`, the clock relative to `reference` (the run's
 * creation), the step by its name (`run` / `turn` for the run's own events), cut to the terminal's width.
 */
export function formatWatchedEvent(term: Terminal, e: Omit<WatchedEvent, 'cursor'>, reference: Date): string {
  const label = e.stepName ?? (e.type.startsWith('run:') ? 'run' : 'turn');
  const head = `${formatClock(e.at, reference)}  ${e.type.padEnd(22)}  ${truncate(label, 16).padEnd(16)}  `;
  const details = truncate(eventDetails(e, reference), Math.max(10, term.width - head.length));
  const style = e.type === 'attempt:stale-rejected' ? 'red' : e.type.startsWith('run:') ? 'bold' : undefined;
  return (paint(term, style, head) + details).trimEnd();
}

/** `text` without terminal colour codes (for measuring). */
function visibleText(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\u001b\[[0-9;]*m/g, '');
}

/**
 * The flow-control line of `runs show`: a workflow run's concurrency key, or a job's (read off its step) and its
 * rate limit; '' when it has none.
 */
function flowLimits(
  concurrency: { readonly key: string; readonly limit: number } | null,
  rate: { readonly key: string; readonly limit: number; readonly periodMs: number } | null,
): string {
  const parts: string[] = [];
  if (concurrency)
    parts.push(`concurrency key ${JSON.stringify(concurrency.key)} (limit ${concurrency.limit})`);
  if (rate)
    parts.push(`rate key ${JSON.stringify(rate.key)} (${rate.limit} per ${formatDuration(rate.periodMs)})`);
  return parts.join(' · ');
}
