/**
 * The chaos suite's audit ledger: a trigger the suite installs on the engine's `steps` table that appends every
 * change of (fencing token, nonce, lease expiry, status, worker) to an `audit` table, with the database clock
 * (`clock_timestamp()`, the host clock the workers' `Date.now()` also reads) and the engine's clock
 * (`<schema>.now()`, which time travel may offset). The row is written in the same transaction as the
 * engine's statement, so it commits exactly when the engine's change does — but by the suite's code, not the
 * engine's: the checker (./checker.ts) never reads the engine's own bookkeeping (attempts, events).
 *
 * `at` is taken when the trigger runs, i.e. after the statement locked and changed the row; for a claim that
 * is after any fenced transaction holding the row's lock committed, so "effect before grant" comparisons on
 * `clock_timestamp()` are sound (and on `engine_at`, as long as the engine's clock only moves forward).
 *
 * A second trigger, on the engine's test-only `clock_offset` table, logs every change of the offset of
 * `<schema>.now()` to `clock_jumps` (host time, new offset), so the checker can tell at which host-clock moment
 * the engine's clock passed a given engine time (T10 jumps it forward mid-lease).
 */
export function auditDdl(schema: string): string {
  const q = `"${schema}"`;
  return `
    CREATE TABLE ${q}.audit (
      id bigserial PRIMARY KEY,
      step_id uuid NOT NULL,
      run_id uuid NOT NULL,
      op text NOT NULL,
      fencing_token bigint,
      nonce uuid,
      status text NOT NULL,
      worker_id text,
      lease_expires_at timestamptz,
      -- The unit of work the step's tokens fence (one scope for every row re-created at a position).
      scope text,
      -- The step left 'running' by its own attempt's outcome (ended_nonce = nonce), not by a cancel, the run's
      -- end, a retirement or a sweep: only then is its holder done at once; otherwise it may run to its lease.
      self_ended boolean NOT NULL DEFAULT false,
      -- The engine time at which a heartbeat decided to renew (the step's last_heartbeat_at, read once its locks
      -- were held): the row trigger fires only at the end of the statement, which a loaded machine can push past
      -- the old expiry although the renewal was decided before it.
      heartbeat_at timestamptz,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      engine_at timestamptz NOT NULL DEFAULT ${q}."now"());
    CREATE INDEX ON ${q}.audit (step_id, id);

    CREATE FUNCTION ${q}.chaos_audit_step() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT'
         OR NEW.fencing_token IS DISTINCT FROM OLD.fencing_token
         OR NEW.nonce IS DISTINCT FROM OLD.nonce
         OR NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at
         OR NEW.status IS DISTINCT FROM OLD.status
         OR NEW.worker_id IS DISTINCT FROM OLD.worker_id THEN
        INSERT INTO ${q}.audit (step_id, run_id, op, fencing_token, nonce, status, worker_id, lease_expires_at,
                                scope, self_ended, heartbeat_at)
        VALUES (NEW.id, NEW.run_id, lower(TG_OP), NEW.fencing_token, NEW.nonce, NEW.status, NEW.worker_id,
                NEW.lease_expires_at, NEW.fencing_scope,
                NEW.nonce IS NOT NULL AND NEW.ended_nonce IS NOT DISTINCT FROM NEW.nonce,
                CASE WHEN NEW.last_heartbeat_at IS DISTINCT FROM OLD.last_heartbeat_at THEN NEW.last_heartbeat_at END);
      END IF;
      RETURN NEW;
    END $$;

    CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE ON ${q}.steps
      FOR EACH ROW EXECUTE FUNCTION ${q}.chaos_audit_step();

    CREATE TABLE ${q}.clock_jumps (
      id bigserial PRIMARY KEY,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      offset_ms bigint NOT NULL);

    CREATE FUNCTION ${q}.chaos_audit_clock() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ${q}.clock_jumps (offset_ms)
      VALUES (CASE WHEN TG_OP = 'DELETE' THEN 0 ELSE NEW.offset_ms END);
      RETURN NULL;
    END $$;

    CREATE TRIGGER chaos_audit_clock AFTER INSERT OR UPDATE OR DELETE ON ${q}.clock_offset
      FOR EACH ROW EXECUTE FUNCTION ${q}.chaos_audit_clock();`;
}

/** Worker ids starting with this are operator actions (a revoke), not grants to a worker. */
export const OPERATOR_PREFIX = 'operator:';
