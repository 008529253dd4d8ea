/** SQL text for test set-up that PostgreSQL cannot take as a parameter (database, schema and table names). */

/** `name` as a quoted SQL identifier: in double quotes, each `"` in it doubled. Any text is safe to pass. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
