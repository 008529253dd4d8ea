/**
 * Terminal formatting for the CLI: colours (only when stdout is a TTY), tables that fit the terminal (at most
 * 100 columns), durations and UTC timestamps. Pure functions of their input and a {@link Terminal}; no I/O.
 * @module
 */

/** What output may look like: colours or not, and how many columns a line may take. */
export interface Terminal {
  readonly color: boolean;
  readonly width: number;
}

/** Widest line the CLI prints, even on a wider terminal. */
export const MAX_WIDTH = 100;
const MIN_WIDTH = 40;

/**
 * Colours only on a TTY (and not under `NO_COLOR` or `TERM=dumb`); width = the terminal's, capped at
 * {@link MAX_WIDTH}; {@link MAX_WIDTH} when not a TTY.
 */
export function detectTerminal(
  stream: { readonly isTTY?: boolean; readonly columns?: number },
  env: NodeJS.ProcessEnv,
): Terminal {
  const tty = stream.isTTY === true;
  const color = tty && env.NO_COLOR === undefined && env.TERM !== 'dumb';
  const columns = tty && stream.columns !== undefined && stream.columns > 0 ? stream.columns : MAX_WIDTH;
  return { color, width: Math.max(MIN_WIDTH, Math.min(MAX_WIDTH, columns)) };
}

const ANSI = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  magenta: [35, 39],
  cyan: [36, 39],
} as const;

export type Style = keyof typeof ANSI;

/** `text` in `style` when the terminal has colours, else `text` unchanged. */
export function paint(term: Terminal, style: Style | undefined, text: string): string {
  if (!term.color || style === undefined || text === '') return text;
  const [on, off] = ANSI[style];
  return `\u001b[${on}m${text}\u001b[${off}m`;
}

/** The style of a run, step or attempt status / outcome. */
export function statusStyle(status: string | null): Style | undefined {
  switch (status) {
    case 'completed':
      return 'green';
    case 'failed':
    case 'timed_out':
    case 'rejected_stale':
      return 'red';
    case 'cancelled':
    case 'lease_expired':
      return 'yellow';
    case 'running':
    case null:
      return 'cyan';
    case 'pending':
    case 'scheduled':
    case 'released':
      return 'dim';
    default:
      return undefined;
  }
}

/** Cut `text` to `width` characters, marking the cut with `…` at the end or in the middle. */
export function truncate(text: string, width: number, where: 'end' | 'middle' = 'end'): string {
  const chars = [...text];
  if (chars.length <= width) return text;
  if (width <= 1) return '…'.slice(0, width);
  if (where === 'end') return chars.slice(0, width - 1).join('') + '…';
  const head = Math.ceil((width - 1) / 2);
  const tail = width - 1 - head;
  return chars.slice(0, head).join('') + '…' + (tail > 0 ? chars.slice(-tail).join('') : '');
}

/**
 * `text` in lines of at most `width` characters, for what must be read whole (an error message): each line of
 * `text` broken at its last space that fits, a word longer than `width` split. Never returns no line.
 */
export function wrap(text: string, width: number): string[] {
  const room = Math.max(1, width);
  const out: string[] = [];
  for (const paragraph of text.split('\n')) {
    let rest = [...paragraph.trimEnd()];
    if (rest.length === 0) out.push('');
    while (rest.length > 0) {
      if (rest.length <= room) {
        out.push(rest.join(''));
        break;
      }
      const space = rest.lastIndexOf(' ', room);
      const cut = space > 0 ? space : room;
      out.push(rest.slice(0, cut).join('').trimEnd());
      rest = rest.slice(space > 0 ? cut + 1 : cut);
    }
  }
  return out.length > 0 ? out : [''];
}

/**
 * The first `head` and last `tail` of `items`, and how many were left out between them (0 when all fit, or with
 * `all`): the long lists of `runs show` (attempts, events) are summarized unless `--all` is given.
 */
export function elide<T>(
  items: readonly T[],
  p: { readonly head: number; readonly tail: number; readonly all: boolean },
): { readonly head: readonly T[]; readonly omitted: number; readonly tail: readonly T[] } {
  // Leaving out fewer than a handful saves nothing: show them.
  if (p.all || items.length <= p.head + p.tail + 5) return { head: items, omitted: 0, tail: [] };
  return {
    head: items.slice(0, p.head),
    omitted: items.length - p.head - p.tail,
    tail: items.slice(items.length - p.tail),
  };
}

function visibleLength(text: string): number {
  return [...text].length;
}

/** One column of a {@link table}. */
export interface Column {
  readonly header: string;
  readonly align?: 'left' | 'right';
  /** May this column be cut to fit the width, and where. @defaultValue false (never cut) */
  readonly shrink?: 'end' | 'middle' | false;
  /** Narrowest a shrinkable column gets. @defaultValue 8 */
  readonly minWidth?: number;
  /**
   * When a cell of this column is cut, also print it whole on a line of its own under its row, after this label
   * (wrapped, never cut): for a value that is read, not only scanned. @defaultValue none
   */
  readonly wholeBelow?: string;
}

/** One cell: text and an optional style (applied after padding, so colours never change the layout). */
export type Cell = string | { readonly text: string; readonly style?: Style | undefined };

/** A row of cells, or a note printed on its own line under the previous row (indented, cut to fit). */
export type Row = readonly Cell[] | { readonly note: string; readonly style?: Style };

const GAP = '  ';

/**
 * Lay out `rows` under `columns`: each column as wide as its widest cell; when the lines would exceed
 * `term.width`, the widest shrinkable column is narrowed first (never below its `minWidth`), and a cut cell of a
 * `wholeBelow` column is printed whole under its row. Trailing blanks are trimmed. Returns the lines, header first.
 */
export function table(
  term: Terminal,
  columns: readonly Column[],
  rows: readonly Row[],
  indent = '',
): string[] {
  const cellText = (c: Cell | undefined): string =>
    c === undefined ? '' : typeof c === 'string' ? c : c.text;
  const widths = columns.map((col, i) =>
    Math.max(
      visibleLength(col.header),
      ...rows.map((r) => ('note' in r ? 0 : visibleLength(cellText(r[i])))),
    ),
  );
  const total = () => indent.length + widths.reduce((a, b) => a + b, 0) + GAP.length * (columns.length - 1);
  while (total() > term.width) {
    let widest = -1;
    for (const [i, col] of columns.entries()) {
      const w = widths[i] ?? 0;
      if (col.shrink && w > (col.minWidth ?? 8) && (widest < 0 || w > (widths[widest] ?? 0))) widest = i;
    }
    if (widest < 0) break; // nothing left to shrink: the line stays long rather than lose a fixed column
    widths[widest] = (widths[widest] ?? 0) - 1;
  }
  const line = (cells: readonly Cell[], header: boolean): string =>
    (
      indent +
      columns
        .map((col, i) => {
          const width = widths[i] ?? 0;
          const cell = cells[i];
          const text = truncate(cellText(cell), width, col.shrink || 'end');
          const pad = ' '.repeat(Math.max(0, width - visibleLength(text)));
          const padded = col.align === 'right' ? pad + text : text + pad;
          const style = header ? 'bold' : typeof cell === 'object' ? cell.style : undefined;
          return paint(term, style, padded);
        })
        .join(GAP)
    ).trimEnd();
  const lines = [
    line(
      columns.map((c) => c.header),
      true,
    ),
  ];
  const noteWidth = Math.max(MIN_WIDTH, term.width) - indent.length - 4;
  for (const row of rows) {
    if ('note' in row) {
      // Notes are failures: wrapped, never cut.
      for (const part of wrap(row.note, noteWidth))
        lines.push(indent + '    ' + paint(term, row.style, part));
      continue;
    }
    lines.push(line(row, false));
    for (const [i, col] of columns.entries()) {
      const text = cellText(row[i]);
      if (col.wholeBelow === undefined || visibleLength(text) <= (widths[i] ?? 0)) continue;
      const label = col.wholeBelow;
      wrap(text, noteWidth - label.length - 1).forEach((part, k) =>
        lines.push(
          indent + '    ' + (k === 0 ? paint(term, 'dim', label) : ' '.repeat(label.length)) + ' ' + part,
        ),
      );
    }
  }
  return lines;
}

/** `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`; `—` when unknown. */
export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
  const v = Math.max(0, ms);
  if (v < 1_000) return `${Math.round(v)}ms`;
  if (v < 60_000) return `${(Math.floor(v / 100) / 10).toFixed(1)}s`;
  const two = (n: number) => String(Math.floor(n)).padStart(2, '0');
  if (v < 3_600_000) return `${Math.floor(v / 60_000)}m${two((v % 60_000) / 1_000)}s`;
  if (v < 86_400_000) return `${Math.floor(v / 3_600_000)}h${two((v % 3_600_000) / 60_000)}m`;
  return `${Math.floor(v / 86_400_000)}d${two((v % 86_400_000) / 3_600_000)}h`;
}

/** A time as given (a `Date`, or ISO 8601 text) as ISO 8601 text; null when missing. */
function isoOf(time: Date | string | null | undefined): string | null {
  if (time === null || time === undefined) return null;
  if (typeof time === 'string') return time;
  return Number.isNaN(time.getTime()) ? null : time.toISOString();
}

/** Milliseconds from `from` to `to` (`Date`s or ISO timestamps); undefined when either is missing. */
export function msBetween(
  from: Date | string | null | undefined,
  to: Date | string | null | undefined,
): number | undefined {
  const a = isoOf(from);
  const b = isoOf(to);
  if (!a || !b) return undefined;
  return Date.parse(b) - Date.parse(a);
}

/** `2025-06-01 12:00:00` (UTC) from a `Date` or an ISO timestamp; with milliseconds when `ms`. */
export function formatTimestamp(time: Date | string | null | undefined, ms = false): string {
  const iso = isoOf(time);
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const s = d.toISOString(); // 2025-06-01T12:00:00.123Z
  return `${s.slice(0, 10)} ${s.slice(11, ms ? 23 : 19)}`;
}

/**
 * A time inside a timeline: `12:00:00.123` when it falls on the same UTC day as `reference`, else with
 * its date. Both are `Date`s or ISO timestamps.
 */
export function formatClock(
  time: Date | string | null | undefined,
  reference: Date | string | null | undefined,
): string {
  const iso = isoOf(time);
  if (!iso) return '—';
  const ref = isoOf(reference);
  const full = formatTimestamp(iso, true);
  return ref && iso.slice(0, 10) === ref.slice(0, 10) ? full.slice(11) : full;
}

/** A JSON value on one line, cut to `width`. */
export function compactJson(value: unknown, width: number): string {
  let text: string;
  try {
    text = JSON.stringify(value, jsonReplacer) ?? String(value);
  } catch {
    text = String(value);
  }
  return truncate(text, width);
}

/** JSON.stringify replacer that writes bigints (fencing tokens) as strings. */
export function jsonReplacer(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}

/** A stored failure (`SerializedFailure`-like) as `Type: message`: the message's first line, or all of it (`full`). */
export function formatFailure(error: unknown, full = false): string | undefined {
  if (error === null || error === undefined) return undefined;
  if (typeof error === 'string') return error;
  if (typeof error !== 'object') return JSON.stringify(error);
  const e = error as { type?: unknown; message?: unknown };
  const type = typeof e.type === 'string' ? e.type : undefined;
  const message = typeof e.message === 'string' ? (full ? e.message : e.message.split('\n')[0]) : undefined;
  if (type && message) return `${type}: ${message}`;
  return type ?? message ?? compactJson(error, 200);
}

/** Remove the password from a connection URL before printing it. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
  }
}
