-- The one time function every lease and due-time comparison reads: the server's clock_timestamp() (never
-- now(), which is frozen at transaction start) plus a test-only offset for time travel. VOLATILE: it must be
-- read afresh at each evaluation, including an EvalPlanQual recheck after waiting for a row lock.
CREATE FUNCTION "palisade"."now"() RETURNS timestamptz
  LANGUAGE sql VOLATILE PARALLEL SAFE
  AS $$ SELECT clock_timestamp() + coalesce((SELECT "offset_ms" FROM "palisade"."clock_offset"), 0) * interval '1 millisecond' $$;
--> statement-breakpoint
-- Backoff before attempt n+1 after attempt n (1-based) failed or expired, from a resolved retry policy:
-- min(initial * coefficient^(n-1), maximum), shortened by up to `jitter` (a fraction) at random so that the
-- retries of many steps spread out instead of arriving together (FAILURE-CASES F09).
CREATE FUNCTION "palisade"."retry_delay_ms"(policy jsonb, attempt integer) RETURNS integer
  LANGUAGE sql VOLATILE PARALLEL SAFE
  AS $$
    SELECT greatest(0, round(
      least(
        (policy->>'initialIntervalMs')::float8 * power((policy->>'backoffCoefficient')::float8, greatest(attempt - 1, 0)),
        (policy->>'maximumIntervalMs')::float8
      ) * (1 - coalesce((policy->>'jitter')::float8, 0) * random())
    ))::integer
  $$;
--> statement-breakpoint
-- Tokens and epochs only grow (DESIGN.md §4 invariant 6): a second line of defence behind the statements,
-- which always take tokens from the global sequence. SQLSTATE PL001 is classified as fatal by the engine.
CREATE FUNCTION "palisade"."guard_monotonic_tokens"() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
  BEGIN
    IF TG_TABLE_NAME = 'steps' THEN
      IF OLD.fencing_token IS NOT NULL AND NEW.fencing_token IS DISTINCT FROM OLD.fencing_token
         AND (NEW.fencing_token IS NULL OR NEW.fencing_token < OLD.fencing_token) THEN
        RAISE EXCEPTION 'fencing token of step % would decrease from % to %', OLD.id, OLD.fencing_token, NEW.fencing_token
          USING ERRCODE = 'PL001';
      END IF;
      IF NEW.epoch < OLD.epoch THEN
        RAISE EXCEPTION 'epoch of step % would decrease from % to %', OLD.id, OLD.epoch, NEW.epoch USING ERRCODE = 'PL001';
      END IF;
    ELSE
      IF OLD.turn_token IS NOT NULL AND NEW.turn_token IS DISTINCT FROM OLD.turn_token
         AND (NEW.turn_token IS NULL OR NEW.turn_token < OLD.turn_token) THEN
        RAISE EXCEPTION 'turn token of run % would decrease from % to %', OLD.id, OLD.turn_token, NEW.turn_token
          USING ERRCODE = 'PL001';
      END IF;
      IF NEW.turn_epoch < OLD.turn_epoch THEN
        RAISE EXCEPTION 'turn epoch of run % would decrease', OLD.id USING ERRCODE = 'PL001';
      END IF;
    END IF;
    RETURN NEW;
  END
  $$;
--> statement-breakpoint
CREATE TRIGGER "steps_guard_monotonic_tokens" BEFORE UPDATE ON "palisade"."steps"
  FOR EACH ROW EXECUTE FUNCTION "palisade"."guard_monotonic_tokens"();
--> statement-breakpoint
CREATE TRIGGER "runs_guard_monotonic_tokens" BEFORE UPDATE ON "palisade"."runs"
  FOR EACH ROW EXECUTE FUNCTION "palisade"."guard_monotonic_tokens"();
