// Declarations of the vendored driver: upstream's own, from the `postgres` package (3.4.x, a dependency of
// @palisade/engine), so a client made here has exactly the type drizzle-orm and other libraries expect.
import postgres from 'postgres';
export default postgres;
export type {
  Error,
  Fragment,
  Helper,
  JSONValue,
  ListenMeta,
  ListenRequest,
  Notice,
  Options,
  Parameter,
  PendingQuery,
  PostgresError,
  ReservedSql,
  Row,
  RowList,
  Serializable,
  Sql,
  TransactionSql,
} from 'postgres';
