-- The per-row function calls of the hot statements (issue 28, STORAGE.md §4 step 6b). Measured on 10,000 no-op jobs
-- at c = 10 (track_functions = all): the function calls a job's three statements made took more server time than
-- the rest of them — the ready triggers 734 ms (3 plpgsql calls a job, each running its own UPDATE, INSERT or
-- DELETE), retry_delay_ms 280 ms (a SQL function with a FROM clause is never inlined: the SQL-function executor
-- runs for every call, 28 µs each), the token guards 74 ms (2–3 calls a job, nearly all of them for updates that
-- do not touch a token), ready_slot() 62 ms (the default of every inserted ready row) and uuid7() 57 ms (the
-- default of every step's id). Each keeps exactly what it did; only how often and how dearly it runs changes.
--
-- retry_delay_ms, uuid7, now() and policy_id as plpgsql: the same expressions, evaluated on plpgsql's fast path for simple
-- expressions (now(): through a plan plpgsql keeps for the session) instead of the SQL-function executor, which
-- parses and plans the body again in every statement that calls it (now(): ~30 µs a statement, pgbench).
CREATE OR REPLACE FUNCTION "palisade"."retry_delay_ms"(policy jsonb, attempt integer) RETURNS integer
  LANGUAGE plpgsql VOLATILE PARALLEL SAFE
  AS $$
DECLARE
  initial float8 := least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'initialIntervalMs') = 'number'
                                            THEN (policy->>'initialIntervalMs')::numeric END, 1000), 0), 2147483647)::float8;
  maximum float8 := least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'maximumIntervalMs') = 'number'
                                            THEN (policy->>'maximumIntervalMs')::numeric END, 2147483647), 0), 2147483647)::float8;
  coef float8 := least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'backoffCoefficient') = 'number'
                                         THEN (policy->>'backoffCoefficient')::numeric END, 2), 1), 1e300)::float8;
  jitter float8 := least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'jitter') = 'number'
                                           THEN (policy->>'jitter')::numeric END, 0), 0), 1)::float8;
  k integer := greatest(coalesce(attempt, 1) - 1, 0);
BEGIN
  IF initial <= 0 OR maximum <= 0 THEN
    RETURN 0;
  END IF;
  RETURN least(2147483647, greatest(0, round(
           CASE WHEN ln(initial) + k * ln(coef) < ln(maximum) THEN initial * power(coef, k) ELSE maximum END
           * (1 - jitter * random()))))::integer;
END
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION "palisade"."uuid7"() RETURNS uuid
  LANGUAGE plpgsql VOLATILE PARALLEL SAFE
  AS $$
DECLARE
  us bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
BEGIN
  RETURN encode(
           set_byte(
             set_byte(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(us / 1000) FROM 3) FROM 1 FOR 6),
                      6, (112 + (us % 1000) * 4096 / 1000 / 256)::int),
             7, ((us % 1000) * 4096 / 1000 % 256)::int),
           'hex')::uuid;
END
$$;
--> statement-breakpoint
-- As migration 0027's, the same expression: a SQL function that cannot be inlined (jsonb_build_array is not
-- immutable) is parsed again in every statement that calls it — 0.11 ms a call, twice a workflow step, in a turn
-- commit whose prepared plan evaluates it at run time.
CREATE OR REPLACE FUNCTION "palisade"."policy_id"(retry_policy jsonb, lease_ms integer, start_to_close_timeout_ms integer)
  RETURNS uuid LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  RETURN left(encode(sha256(convert_to(jsonb_build_array(retry_policy, lease_ms, start_to_close_timeout_ms)::text,
                                       'UTF8')), 'hex'), 32)::uuid;
END
$$;
--> statement-breakpoint
-- As migration 0001's: VOLATILE, so that each call reads clock_offset afresh (plpgsql takes a new snapshot for each
-- query of a VOLATILE function under READ COMMITTED, as the SQL function did), including in an EvalPlanQual recheck.
CREATE OR REPLACE FUNCTION "palisade"."now"() RETURNS timestamptz
  LANGUAGE plpgsql VOLATILE PARALLEL SAFE
  AS $$
BEGIN
  RETURN clock_timestamp() + coalesce((SELECT "offset_ms" FROM "palisade"."clock_offset"), 0) * interval '1 millisecond';
END
$$;
--> statement-breakpoint
-- The token guards (migration 0001) fire only for an update that would make them raise: the same condition, in the
-- trigger's WHEN, so the updates that leave a token as it is (a completion, a heartbeat, a turn's wake-up) call no
-- function.
DROP TRIGGER "steps_guard_monotonic_tokens" ON "palisade"."steps";--> statement-breakpoint
CREATE TRIGGER "steps_guard_monotonic_tokens" BEFORE UPDATE ON "palisade"."steps"
  FOR EACH ROW WHEN ((OLD.fencing_token IS NOT NULL AND NEW.fencing_token IS DISTINCT FROM OLD.fencing_token
                      AND (NEW.fencing_token IS NULL OR NEW.fencing_token < OLD.fencing_token))
                     OR NEW.epoch < OLD.epoch)
  EXECUTE FUNCTION "palisade"."guard_monotonic_tokens"();
--> statement-breakpoint
DROP TRIGGER "runs_guard_monotonic_tokens" ON "palisade"."runs";--> statement-breakpoint
CREATE TRIGGER "runs_guard_monotonic_tokens" BEFORE UPDATE ON "palisade"."runs"
  FOR EACH ROW WHEN ((OLD.turn_token IS NOT NULL AND NEW.turn_token IS DISTINCT FROM OLD.turn_token
                      AND (NEW.turn_token IS NULL OR NEW.turn_token < OLD.turn_token))
                     OR NEW.turn_epoch < OLD.turn_epoch)
  EXECUTE FUNCTION "palisade"."guard_monotonic_tokens"();
--> statement-breakpoint
-- The ready triggers per statement (transition tables) instead of per row: one call per statement that inserts,
-- updates or deletes steps, and one set-based write for each kind of change it made, however many rows it wrote —
-- a batch's claim, completion or heartbeat moves or deletes its rows in one UPDATE or DELETE instead of one per
-- row. Each row is treated exactly as steps_ready_sync treated it: a ready row is made when the step becomes
-- claimable, moved (found by the whole key the old version implies) when its due time, expiry, queue, priority or
-- name changes, deleted when it ends; a row that is not where the old version says (a stale set, which the claim
-- corrects) is made afresh. A statement that writes steps in several CTEs (a claim's grants and its rate
-- deferrals) fires each trigger once, with all their rows. The slot is read once per statement (ready_slot() as a
-- default is a call per row). An UPDATE trigger with transition tables may not name columns, so it runs for every
-- UPDATE of steps; one that changed no ready key reads its transition tables and writes nothing.
CREATE FUNCTION "palisade"."steps_ready_sync_statement"() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  to_move integer;
  to_delete integer;
  to_insert integer;
  moved integer := 0;
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO "palisade"."ready" (slot, queue, priority, due_at, name, step_id, run_id, expiring)
    SELECT (SELECT current_slot FROM "palisade"."ready_ring"), n.queue, n.priority, "palisade"."ready_due"(n), n.name,
           n.id, n.run_id, "palisade"."ready_expiring"(n)
      FROM new_steps n
     WHERE "palisade"."ready_due"(n) IS NOT NULL;
    RETURN NULL;
  END IF;
  IF TG_OP = 'DELETE' THEN
    DELETE FROM "palisade"."ready" r
     USING old_steps o
     WHERE "palisade"."ready_due"(o) IS NOT NULL
       AND r.queue = o.queue AND r.priority = o.priority AND r.due_at = "palisade"."ready_due"(o) AND r.name = o.name
       AND r.step_id = o.id;
    RETURN NULL;
  END IF;
  -- An UPDATE: first what it asks for, read off the transition tables alone; then only the writes it needs (each
  -- write on the partitioned ready table has a start-up cost of its own, paid only when it has rows to write).
  -- Each statement below spells out the same join of the transition tables: they are visible only to this
  -- function's own queries, so no view, function or WITH query outside one statement can share it (one statement
  -- with all three writes as WITH queries would start all three every time, as the first version of this did).
  SELECT count(*) FILTER (WHERE c.old_due IS NOT NULL AND c.due IS NOT NULL AND NOT c.same),
         count(*) FILTER (WHERE c.old_due IS NOT NULL AND c.due IS NULL),
         count(*) FILTER (WHERE c.old_due IS NULL AND c.due IS NOT NULL)
    INTO to_move, to_delete, to_insert
    FROM (SELECT o.id, o.queue AS old_queue, o.priority AS old_priority, o.name AS old_name,
                   "palisade"."ready_due"(o) AS old_due, n.queue, n.priority, n.name, n.run_id,
                   "palisade"."ready_due"(n) AS due, "palisade"."ready_expiring"(n) AS exp,
                   coalesce("palisade"."ready_due"(o) = "palisade"."ready_due"(n)
                            AND "palisade"."ready_expiring"(o) = "palisade"."ready_expiring"(n) AND o.queue = n.queue
                            AND o.priority = n.priority AND o.name = n.name, false) AS same
              FROM old_steps o JOIN new_steps n ON n.id = o.id
             WHERE (o.kind = 'activity' OR n.kind = 'activity')
               AND (o.status IN ('scheduled', 'running') OR n.status IN ('scheduled', 'running'))) c;
  IF to_move > 0 THEN
    UPDATE "palisade"."ready" r
       SET due_at = c.due, expiring = c.exp, queue = c.queue, priority = c.priority, name = c.name
      FROM (SELECT o.id, o.queue AS old_queue, o.priority AS old_priority, o.name AS old_name,
                   "palisade"."ready_due"(o) AS old_due, n.queue, n.priority, n.name, n.run_id,
                   "palisade"."ready_due"(n) AS due, "palisade"."ready_expiring"(n) AS exp,
                   coalesce("palisade"."ready_due"(o) = "palisade"."ready_due"(n)
                            AND "palisade"."ready_expiring"(o) = "palisade"."ready_expiring"(n) AND o.queue = n.queue
                            AND o.priority = n.priority AND o.name = n.name, false) AS same
              FROM old_steps o JOIN new_steps n ON n.id = o.id
             WHERE (o.kind = 'activity' OR n.kind = 'activity')
               AND (o.status IN ('scheduled', 'running') OR n.status IN ('scheduled', 'running'))) c
     WHERE c.old_due IS NOT NULL AND c.due IS NOT NULL AND NOT c.same
       AND r.queue = c.old_queue AND r.priority = c.old_priority AND r.due_at = c.old_due AND r.name = c.old_name
       AND r.step_id = c.id;
    GET DIAGNOSTICS moved = ROW_COUNT;
  END IF;
  IF to_delete > 0 THEN
    DELETE FROM "palisade"."ready" r
     USING (SELECT o.id, o.queue AS old_queue, o.priority AS old_priority, o.name AS old_name,
                   "palisade"."ready_due"(o) AS old_due, n.queue, n.priority, n.name, n.run_id,
                   "palisade"."ready_due"(n) AS due, "palisade"."ready_expiring"(n) AS exp,
                   coalesce("palisade"."ready_due"(o) = "palisade"."ready_due"(n)
                            AND "palisade"."ready_expiring"(o) = "palisade"."ready_expiring"(n) AND o.queue = n.queue
                            AND o.priority = n.priority AND o.name = n.name, false) AS same
              FROM old_steps o JOIN new_steps n ON n.id = o.id
             WHERE (o.kind = 'activity' OR n.kind = 'activity')
               AND (o.status IN ('scheduled', 'running') OR n.status IN ('scheduled', 'running'))) c
     WHERE c.old_due IS NOT NULL AND c.due IS NULL
       AND r.queue = c.old_queue AND r.priority = c.old_priority AND r.due_at = c.old_due AND r.name = c.old_name
       AND r.step_id = c.id;
  END IF;
  -- Made: a step that became claimable, and one whose row was not where its old version said (not moved above: it
  -- has no row at its new key either).
  IF to_insert > 0 OR moved < to_move THEN
    INSERT INTO "palisade"."ready" (slot, queue, priority, due_at, name, step_id, run_id, expiring)
    SELECT (SELECT current_slot FROM "palisade"."ready_ring"), c.queue, c.priority, c.due, c.name, c.id, c.run_id, c.exp
      FROM (SELECT o.id, o.queue AS old_queue, o.priority AS old_priority, o.name AS old_name,
                   "palisade"."ready_due"(o) AS old_due, n.queue, n.priority, n.name, n.run_id,
                   "palisade"."ready_due"(n) AS due, "palisade"."ready_expiring"(n) AS exp,
                   coalesce("palisade"."ready_due"(o) = "palisade"."ready_due"(n)
                            AND "palisade"."ready_expiring"(o) = "palisade"."ready_expiring"(n) AND o.queue = n.queue
                            AND o.priority = n.priority AND o.name = n.name, false) AS same
              FROM old_steps o JOIN new_steps n ON n.id = o.id
             WHERE (o.kind = 'activity' OR n.kind = 'activity')
               AND (o.status IN ('scheduled', 'running') OR n.status IN ('scheduled', 'running'))) c
     WHERE c.due IS NOT NULL
       AND (c.old_due IS NULL
            OR (NOT c.same AND NOT EXISTS (SELECT 1 FROM "palisade"."ready" r
                                            WHERE r.queue = c.queue AND r.priority = c.priority AND r.due_at = c.due
                                              AND r.name = c.name AND r.step_id = c.id)));
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
DROP TRIGGER "steps_ready_insert" ON "palisade"."steps";--> statement-breakpoint
DROP TRIGGER "steps_ready_update" ON "palisade"."steps";--> statement-breakpoint
DROP TRIGGER "steps_ready_delete" ON "palisade"."steps";--> statement-breakpoint
DROP FUNCTION "palisade"."steps_ready_sync"();--> statement-breakpoint
CREATE TRIGGER "steps_ready_insert" AFTER INSERT ON "palisade"."steps"
  REFERENCING NEW TABLE AS new_steps
  FOR EACH STATEMENT EXECUTE FUNCTION "palisade"."steps_ready_sync_statement"();
--> statement-breakpoint
CREATE TRIGGER "steps_ready_update" AFTER UPDATE ON "palisade"."steps"
  REFERENCING OLD TABLE AS old_steps NEW TABLE AS new_steps
  FOR EACH STATEMENT EXECUTE FUNCTION "palisade"."steps_ready_sync_statement"();
--> statement-breakpoint
CREATE TRIGGER "steps_ready_delete" AFTER DELETE ON "palisade"."steps"
  REFERENCING OLD TABLE AS old_steps
  FOR EACH STATEMENT EXECUTE FUNCTION "palisade"."steps_ready_sync_statement"();
--> statement-breakpoint
-- Room on each attempts page for its rows' one update (the outcome a completion records), so that update is HOT:
-- with a worker claiming ~60 grants a statement (prefetch, this release) a claim's inserts filled their pages before
-- the completions came, and half the completions' updates left the page, writing all four of attempts' indexes
-- again (C3, 2,000 jobs at c = 10: attempts 50 % HOT, drain 2,036 B per job; at fillfactor 70, 59 % and 1,981 B;
-- at 50, 95 % and 1,800 B). As for steps (50) and runs (40); pages filled from now on.
ALTER TABLE "palisade"."attempts" SET (fillfactor = 50);
--> statement-breakpoint
-- Every attempt row wrote four index entries; no statement reads attempts by step (they find an attempt by its
-- fencing token, and a run's attempts by run_id: describe(), the run_events view, pruning), so the (step_id, epoch)
-- index goes: one entry (~84 B of WAL, C3) less per attempt (STORAGE.md §3.2 plans one run-scoped key).
DROP INDEX "palisade"."attempts_step_id_idx";
