/**
 * The child-process script of the closed-connection driver check (test/core/driver-closed-socket.test.ts), shared
 * with the packed-install test, which runs it against the installed package. It terminates the backend of a
 * reserved connection, queries it three times, releases it and queries the pool, and prints what it saw as JSON.
 * Unpatched postgres.js 3.4.9 dies here with an uncaught TypeError from `nextWrite`.
 */
export function closedSocketScript(driverSpecifier: string): string {
  return `
import postgres from '${driverSpecifier}';
const url = process.argv[1];
const admin = postgres(url, { max: 1, onnotice: () => {} });
const sql = postgres(url, { max: 1, onnotice: () => {} });
const seen = [];
const reserved = await sql.reserve();
const [{ pid }] = await reserved\`SELECT pg_backend_pid() AS pid\`;
await admin\`SELECT pg_terminate_backend(\${pid})\`;
await new Promise((resolve) => setTimeout(resolve, 200));
for (let i = 0; i < 3; i++) {
  try { await reserved\`SELECT 1\`; seen.push('ok'); } catch (error) { seen.push(error.code); }
}
reserved.release();
const [{ one }] = await sql\`SELECT 1 AS one\`;
seen.push('pool:' + one);
console.log(JSON.stringify(seen));
await Promise.all([admin.end(), sql.end()]);
`;
}

/** What the script must print: three CONNECTION_CLOSED rejections, then a working pool. */
export const CLOSED_SOCKET_EXPECTED = [
  'CONNECTION_CLOSED',
  'CONNECTION_CLOSED',
  'CONNECTION_CLOSED',
  'pool:1',
];
