-- A step's options move off its row into a table of their own, keyed by their content (issue 28, STORAGE.md §3.2
-- and §4 step 3). Every steps row carried a copy of its retry policy (jsonb, ~100-150 B), lease and start-to-close
-- timeout, written by its insert and logged again by every update of the row (a heap update logs the whole new
-- tuple). A workload has a handful of distinct option sets: each is one policies row, and a step names it by
-- policy_id, the hash of its content, so a statement that inserts steps inserts their policy ON CONFLICT DO
-- NOTHING in the same statement, which writes nothing when it exists (the common case). max_attempts stays on the
-- step (a copy of the policy's maximumAttempts, NULL when it has none): ready_expiring reads it as a function of
-- the row alone, in the ready triggers and in the claim's stale-row test, with no join.
CREATE TABLE "palisade"."policies" (
	"id" uuid PRIMARY KEY NOT NULL,
	"retry_policy" jsonb NOT NULL,
	"lease_ms" integer NOT NULL,
	"start_to_close_timeout_ms" integer NOT NULL
);
--> statement-breakpoint
-- The content key of an option set: the first 128 bits of the SHA-256 of its canonical text (jsonb prints its keys
-- in one order and without insignificant white space, whatever order they were written in), as a uuid. SHA-256,
-- not md5, so that a server in FIPS mode can compute it.
CREATE FUNCTION "palisade"."policy_id"(retry_policy jsonb, lease_ms integer, start_to_close_timeout_ms integer)
  RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT left(encode(sha256(convert_to(jsonb_build_array(retry_policy, lease_ms, start_to_close_timeout_ms)::text,
                                       'UTF8')), 'hex'), 32)::uuid
$$;
--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "policy_id" uuid;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "max_attempts" integer;--> statement-breakpoint
CREATE OR REPLACE FUNCTION "palisade"."ready_expiring"(s "palisade"."steps") RETURNS boolean
  LANGUAGE sql IMMUTABLE AS $$
  SELECT s.status = 'running'
     AND (s.cancel_requested_at IS NOT NULL OR coalesce(s.attempt >= s.max_attempts, false))
$$;
--> statement-breakpoint
-- The ready trigger on updates named retry_policy; it names max_attempts instead (a test or an operator that
-- changes a step's attempts budget moves its ready row).
DROP TRIGGER "steps_ready_update" ON "palisade"."steps";--> statement-breakpoint
-- The option sets of the steps there are (each row's set, once), then each step's key and its attempts budget.
-- The backfill's UPDATE moves no ready row: a step's due time and expiry read the same values before and after.
INSERT INTO "palisade"."policies" ("id", "retry_policy", "lease_ms", "start_to_close_timeout_ms")
SELECT DISTINCT "palisade"."policy_id"(retry_policy, lease_ms, start_to_close_timeout_ms), retry_policy, lease_ms,
       start_to_close_timeout_ms
  FROM "palisade"."steps"
ON CONFLICT ("id") DO NOTHING;
--> statement-breakpoint
UPDATE "palisade"."steps"
   SET policy_id = "palisade"."policy_id"(retry_policy, lease_ms, start_to_close_timeout_ms),
       max_attempts = (retry_policy->>'maximumAttempts')::int;
--> statement-breakpoint
ALTER TABLE "palisade"."steps" ALTER COLUMN "policy_id" SET NOT NULL;--> statement-breakpoint
CREATE TRIGGER "steps_ready_update" AFTER UPDATE OF status, next_run_at, lease_expires_at, cancel_requested_at,
  attempt, max_attempts, kind, queue, priority, name ON "palisade"."steps"
  FOR EACH ROW WHEN ((OLD.kind = 'activity' OR NEW.kind = 'activity')
                     AND (OLD.status IN ('scheduled', 'running') OR NEW.status IN ('scheduled', 'running')))
  EXECUTE FUNCTION "palisade"."steps_ready_sync"();
--> statement-breakpoint
ALTER TABLE "palisade"."steps" DROP COLUMN "retry_policy";--> statement-breakpoint
ALTER TABLE "palisade"."steps" DROP COLUMN "lease_ms";--> statement-breakpoint
ALTER TABLE "palisade"."steps" DROP COLUMN "start_to_close_timeout_ms";--> statement-breakpoint
-- Rows ~180 B narrower (a step's insert 424 -> 248 B of WAL): at 50 the claim's and the completion's versions still
-- fit beside a page's rows, 97 % of steps updates HOT in three runs of C3 (30: 92-100 %, 40: 97-100 %), with 0.6x
-- the heap of 30 for the rows that are never updated again (STORAGE.md §4, "Landed: step 3").
ALTER TABLE "palisade"."steps" SET (fillfactor = 50);
