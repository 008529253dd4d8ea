import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  ATTEMPT_KINDS,
  ATTEMPT_OUTCOMES,
  LIVE_RUN_STATUSES,
  LIVE_STEP_STATUSES,
  RUN_KINDS,
  RUN_STATUSES,
  STEP_KINDS,
  STEP_STATUSES,
  TERMINAL_RUN_STATUSES,
  TERMINAL_STEP_STATUSES,
  UNSUCCESSFUL_STATUSES,
  isLiveRunStatus,
  isTerminalRunStatus,
  isTerminalStepStatus,
  sqlList,
} from './state-machine.js';
import {
  INSERTED,
  STATE_MACHINES,
  canTransition,
  mermaidDiagram,
  nextStatuses,
  type StateMachine,
} from './transitions.js';

const machines: readonly StateMachine<string, string>[] = Object.values(STATE_MACHINES);

/** The statuses reachable from an insert, by the table's transitions. */
function reachable(machine: StateMachine<string, string>): Set<string> {
  const seen = new Set<string>();
  const queue: string[] = [INSERTED];
  for (let from = queue.shift(); from !== undefined; from = queue.shift()) {
    for (const t of machine.transitions) {
      if (t.from === from && !seen.has(t.to)) {
        seen.add(t.to);
        queue.push(t.to);
      }
    }
  }
  return seen;
}

describe.each(machines.map((m) => [m.name, m] as const))('the %s machine', (_name, machine) => {
  it('moves only between its own statuses and kinds', () => {
    for (const t of machine.transitions) {
      expect([INSERTED, ...machine.statuses]).toContain(t.from);
      expect(machine.statuses).toContain(t.to);
      expect(t.kinds.length).toBeGreaterThan(0);
      for (const kind of t.kinds) expect(machine.kinds).toContain(kind);
      expect(t.statements.length).toBeGreaterThan(0);
    }
  });

  it('leaves a terminal status only by an operator transition', () => {
    for (const t of machine.transitions) {
      if (t.from !== INSERTED && machine.terminal.includes(t.from)) expect(t.operator).toBe(true);
    }
  });

  it('has as terminal exactly the statuses no engine transition leaves', () => {
    const left = new Set(machine.transitions.filter((t) => !t.operator).map((t) => t.from));
    expect([...machine.terminal].sort()).toEqual(machine.statuses.filter((s) => !left.has(s)).sort());
  });

  it('reaches every status from the insert', () => {
    expect([...reachable(machine)].sort()).toEqual([...machine.statuses].sort());
  });

  it('covers every kind of row it holds', () => {
    const covered = new Set(machine.transitions.flatMap((t) => t.kinds));
    expect([...covered].sort()).toEqual([...machine.kinds].sort());
  });

  it('lists each move once', () => {
    const keys = machine.transitions.map((t) => `${t.from}->${t.to}`);
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('the status sets', () => {
  it('split each machine into live and terminal statuses', () => {
    expect([...LIVE_RUN_STATUSES, ...TERMINAL_RUN_STATUSES].sort()).toEqual([...RUN_STATUSES].sort());
    expect([...LIVE_STEP_STATUSES, ...TERMINAL_STEP_STATUSES].sort()).toEqual([...STEP_STATUSES].sort());
  });

  it('are the ones a retry undoes, and only an operator leaves those', () => {
    for (const status of UNSUCCESSFUL_STATUSES) {
      expect(STATE_MACHINES.run.transitions.filter((t) => t.from === status).every((t) => t.operator)).toBe(
        true,
      );
      expect(STATE_MACHINES.step.transitions.filter((t) => t.from === status).every((t) => t.operator)).toBe(
        true,
      );
    }
    expect(nextStatuses('run', 'completed')).toEqual([]);
    expect(nextStatuses('step', 'completed')).toEqual([]);
  });

  it('tell statuses read from rows apart', () => {
    expect(isTerminalRunStatus('cancelled')).toBe(true);
    expect(isTerminalRunStatus('running')).toBe(false);
    expect(isTerminalRunStatus('scheduled')).toBe(false);
    expect(isLiveRunStatus('pending')).toBe(true);
    expect(isLiveRunStatus('failed')).toBe(false);
    expect(isTerminalStepStatus('failed')).toBe(true);
    expect(isTerminalStepStatus('scheduled')).toBe(false);
  });

  it('answer canTransition from the table', () => {
    expect(canTransition('step', 'scheduled', 'running')).toBe(true);
    expect(canTransition('step', 'completed', 'scheduled')).toBe(false);
    expect(canTransition('run', 'failed', 'pending')).toBe(true);
    expect(canTransition('run', 'completed', 'pending')).toBe(false);
    expect(canTransition('attempt', INSERTED, 'open')).toBe(true);
    expect(canTransition('attempt', 'lease_expired', 'completed')).toBe(false);
  });
});

describe('sqlList', () => {
  it('renders exactly the set, quoted, in order', () => {
    expect(sqlList(LIVE_RUN_STATUSES)).toBe("('pending', 'running')");
    expect(sqlList(LIVE_STEP_STATUSES)).toBe("('scheduled', 'running')");
    expect(sqlList(UNSUCCESSFUL_STATUSES)).toBe("('failed', 'cancelled')");
    expect(sqlList(["it's"])).toBe("('it''s')");
  });

  it('refuses an empty set', () => {
    expect(() => sqlList([])).toThrow(RangeError);
  });
});

describe('migration 0021', () => {
  const migration = readFileSync(new URL('../migrations/0021_status-checks.sql', import.meta.url), 'utf8');
  const checks = new Map<string, string[]>();
  for (const m of migration.matchAll(
    /ADD CONSTRAINT "(\w+)" CHECK \("palisade"\."(\w+)"\."(\w+)" IN \(([^)]*)\)\)/g,
  )) {
    const [, name, table, column, list] = m;
    expect(name).toBe(`${table}_${column}_check`);
    checks.set(
      `${table}.${column}`,
      (list ?? '').split(',').map((v) => v.trim().replace(/^'|'$/g, '')),
    );
  }

  it('CHECKs every status and kind column against exactly the values of the module', () => {
    expect(Object.fromEntries(checks)).toEqual({
      'runs.status': [...RUN_STATUSES],
      'runs.kind': [...RUN_KINDS],
      'steps.status': [...STEP_STATUSES],
      'steps.kind': [...STEP_KINDS],
      'attempts.outcome': [...ATTEMPT_OUTCOMES],
      'attempts.kind': [...ATTEMPT_KINDS],
      'schedules.target_kind': [...RUN_KINDS],
    });
  });
});

describe('STATE-MACHINE.md', () => {
  const doc = readFileSync(new URL('./STATE-MACHINE.md', import.meta.url), 'utf8');
  const diagrams = [...doc.matchAll(/```mermaid\n([\s\S]*?)```/g)].map((m) => m[0]);

  it('holds one diagram per machine, each as the module renders it', () => {
    expect(diagrams).toEqual(machines.map(mermaidDiagram));
  });

  it('draws exactly the transition table, edge for edge', () => {
    machines.forEach((machine, i) => {
      const edges = [
        ...(diagrams[i] ?? '').matchAll(/^\s*(\S+) --> (\S+) : (.+?) \[([^\]]*)\]( \(operator\))?$/gm),
      ].map(([, from, to, event, kinds, operator]) => ({
        from,
        to,
        event,
        kinds: kinds?.split(', '),
        operator: !!operator,
      }));
      expect(edges).toEqual(
        machine.transitions.map((t) => ({
          from: t.from,
          to: t.to,
          event: t.event,
          kinds: [...t.kinds],
          operator: t.operator === true,
        })),
      );
    });
  });

  it('covers every step kind and the workflow turn', () => {
    const step = diagrams[machines.indexOf(STATE_MACHINES.step)] ?? '';
    for (const kind of STEP_KINDS) expect(step).toMatch(new RegExp(`\\[[^\\]]*\\b${kind}\\b[^\\]]*\\]`));
    expect(diagrams[machines.indexOf(STATE_MACHINES.attempt)]).toMatch(/\[[^\]]*\bturn\b[^\]]*\]/);
  });
});
