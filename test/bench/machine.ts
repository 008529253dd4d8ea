/** What the numbers were measured on: the machine, Node, and the PostgreSQL server with its durability settings. */
import { arch, cpus, loadavg, platform, release, totalmem } from 'node:os';
import type postgres from '@palisade/engine/postgres';

export interface MachineInfo {
  readonly cpuModel: string;
  readonly cpuCount: number;
  readonly totalMemoryGiB: number;
  readonly os: string;
  readonly node: string;
  /** 1, 5 and 15 minute load averages when the run started (other work on the machine skews every number). */
  readonly loadAverage: readonly number[];
}

export interface PostgresInfo {
  readonly version: string;
  /** Settings that decide what a commit costs, and the server's size limits. */
  readonly settings: Readonly<Record<string, string>>;
  /** Other client sessions on the server when the run started (they compete for the same cores). */
  readonly otherSessions: number;
}

export function loadAverage(): number[] {
  return loadavg().map((x) => Math.round(x * 100) / 100);
}

export function machineInfo(): MachineInfo {
  const list = cpus();
  return {
    cpuModel: list[0]?.model.trim() ?? 'unknown',
    cpuCount: list.length,
    totalMemoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${platform()} ${release()} ${arch()}`,
    node: process.version,
    loadAverage: loadAverage(),
  };
}

const SETTINGS = [
  'fsync',
  'synchronous_commit',
  'wal_sync_method',
  'commit_delay',
  'shared_buffers',
  'max_connections',
  'jit',
  'autovacuum',
] as const;

export async function postgresInfo(admin: postgres.Sql): Promise<PostgresInfo> {
  const [row] = await admin<{ version: string }[]>`select version() as version`;
  const settings = await admin<{ name: string; setting: string; unit: string | null }[]>`
    select name, setting, unit from pg_settings where name in ${admin(SETTINGS)}`;
  const [sessions] = await admin<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where backend_type = 'client backend' and pid <> pg_backend_pid()`;
  const shown = Object.fromEntries(
    settings.map((s) => [
      s.name,
      s.name === 'shared_buffers' ? `${(Number(s.setting) * 8) / 1024}MB` : s.setting,
    ]),
  );
  return { version: row?.version ?? 'unknown', settings: shown, otherSessions: sessions?.n ?? 0 };
}
