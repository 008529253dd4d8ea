-- The claimable set of activity steps moves off the wide steps row into a narrow table of its own (issue 28,
-- STORAGE.md §3.2 and §4 step 4). steps_claimable_idx, steps_claim_order_idx and steps_running_lease_idx keyed
-- status, next_run_at and lease_expires_at, so no claim, heartbeat or completion of a step was a HOT update, and
-- under a held MVCC horizon the claim walked every dead version. A step now has a ready row exactly while it is
-- claimable now or later (scheduled, or running: due at lease end + reclaim delay), kept by the triggers below on
-- every path that writes a step; the claim picks from ready and re-checks the step row under its lock.
CREATE TABLE "palisade"."ready" (
	"slot" smallint DEFAULT 0 NOT NULL,
	"queue" text NOT NULL,
	"priority" integer NOT NULL,
	"due_at" timestamp with time zone NOT NULL,
	"name" text NOT NULL,
	"step_id" uuid NOT NULL,
	"run_id" uuid NOT NULL,
	"expiring" boolean DEFAULT false NOT NULL
) PARTITION BY LIST ("slot");
--> statement-breakpoint
CREATE TABLE "palisade"."ready_0" PARTITION OF "palisade"."ready" FOR VALUES IN (0);--> statement-breakpoint
CREATE INDEX "ready_claim_order_idx" ON "palisade"."ready" USING btree ("queue","priority" DESC NULLS FIRST,"due_at","name","step_id");--> statement-breakpoint
CREATE INDEX "ready_expiring_idx" ON "palisade"."ready" USING btree ("due_at") WHERE "palisade"."ready"."expiring";--> statement-breakpoint
-- Whether activity step s must be ended rather than reclaimed once its lease expires (cancel requested, or no
-- attempts left), and when its ready row is due (NULL: it has none). Immutable functions of the row alone, used by
-- the triggers, the claim's stale-row test and this migration's backfill, so all three agree.
CREATE FUNCTION "palisade"."ready_expiring"(s "palisade"."steps") RETURNS boolean
  LANGUAGE sql IMMUTABLE AS $$
  SELECT s.status = 'running'
     AND (s.cancel_requested_at IS NOT NULL OR coalesce(s.attempt >= (s.retry_policy->>'maximumAttempts')::int, false))
$$;
--> statement-breakpoint
CREATE FUNCTION "palisade"."ready_due"(s "palisade"."steps") RETURNS timestamptz
  LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN s.kind = 'activity' AND s.status IN ('scheduled', 'running') AND s.next_run_at IS NOT NULL
              THEN CASE WHEN "palisade"."ready_expiring"(s) THEN least(s.next_run_at, s.lease_expires_at)
                        ELSE s.next_run_at END END
$$;
--> statement-breakpoint
-- Keeps steps row OLD/NEW's ready row in step: inserted when the step becomes claimable, moved (one UPDATE, in
-- the one partition) when its due time or expiry changes, deleted when it ends. The row is found through
-- ready_claim_order_idx by the whole key OLD says it has (queue, priority, due, name, step id: many rows may share
-- a due time, as a batch's grants or a bulk enqueue's rows do): ready.due_at always equals
-- ready_due(step), so no second index and no mirror column is needed. A row that is not where OLD says (a stale
-- set, which the claim corrects) is inserted afresh.
CREATE FUNCTION "palisade"."steps_ready_sync"() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  old_due timestamptz;
  new_due timestamptz;
  new_exp boolean;
BEGIN
  IF TG_OP <> 'INSERT' THEN old_due := "palisade"."ready_due"(OLD); END IF;
  IF TG_OP <> 'DELETE' THEN
    new_due := "palisade"."ready_due"(NEW);
    new_exp := "palisade"."ready_expiring"(NEW);
  END IF;
  IF old_due IS NOT NULL THEN
    IF new_due IS NOT NULL THEN
      IF old_due = new_due AND "palisade"."ready_expiring"(OLD) = new_exp AND OLD.queue = NEW.queue
         AND OLD.priority = NEW.priority AND OLD.name = NEW.name THEN
        RETURN NULL;
      END IF;
      UPDATE "palisade"."ready" SET due_at = new_due, expiring = new_exp, queue = NEW.queue,
                                    priority = NEW.priority, name = NEW.name
       WHERE queue = OLD.queue AND priority = OLD.priority AND due_at = old_due AND name = OLD.name
         AND step_id = OLD.id;
      IF FOUND THEN RETURN NULL; END IF;
    ELSE
      DELETE FROM "palisade"."ready"
       WHERE queue = OLD.queue AND priority = OLD.priority AND due_at = old_due AND name = OLD.name
         AND step_id = OLD.id;
      RETURN NULL;
    END IF;
  END IF;
  IF new_due IS NOT NULL THEN
    INSERT INTO "palisade"."ready" (queue, priority, due_at, name, step_id, run_id, expiring)
    VALUES (NEW.queue, NEW.priority, new_due, NEW.name, NEW.id, NEW.run_id, new_exp);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER "steps_ready_insert" AFTER INSERT ON "palisade"."steps"
  FOR EACH ROW WHEN (NEW.kind = 'activity' AND NEW.status IN ('scheduled', 'running') AND NEW.next_run_at IS NOT NULL)
  EXECUTE FUNCTION "palisade"."steps_ready_sync"();
--> statement-breakpoint
CREATE TRIGGER "steps_ready_update" AFTER UPDATE OF status, next_run_at, lease_expires_at, cancel_requested_at,
  attempt, retry_policy, kind, queue, priority, name ON "palisade"."steps"
  FOR EACH ROW WHEN ((OLD.kind = 'activity' OR NEW.kind = 'activity')
                     AND (OLD.status IN ('scheduled', 'running') OR NEW.status IN ('scheduled', 'running')))
  EXECUTE FUNCTION "palisade"."steps_ready_sync"();
--> statement-breakpoint
CREATE TRIGGER "steps_ready_delete" AFTER DELETE ON "palisade"."steps"
  FOR EACH ROW WHEN (OLD.kind = 'activity' AND OLD.status IN ('scheduled', 'running'))
  EXECUTE FUNCTION "palisade"."steps_ready_sync"();
--> statement-breakpoint
-- The activities in flight at the upgrade: every scheduled step due at its next_run_at, every running one at its
-- lease end + reclaim delay (its next_run_at, as the claim reads it today), so each is claimed and reclaimed
-- exactly as before.
INSERT INTO "palisade"."ready" (queue, priority, due_at, name, step_id, run_id, expiring)
SELECT s.queue, s.priority, "palisade"."ready_due"(s), s.name, s.id, s.run_id, "palisade"."ready_expiring"(s)
  FROM "palisade"."steps" s
 WHERE "palisade"."ready_due"(s) IS NOT NULL;
--> statement-breakpoint
DROP INDEX "palisade"."steps_claimable_idx";--> statement-breakpoint
DROP INDEX "palisade"."steps_claim_order_idx";--> statement-breakpoint
DROP INDEX "palisade"."steps_running_lease_idx";--> statement-breakpoint
DROP INDEX "palisade"."steps_concurrency_running_idx";--> statement-breakpoint
DROP INDEX "palisade"."steps_flow_keyed_live_idx";--> statement-breakpoint
-- Flow control over generated columns that change only for the rows they index (as runs.live_concurrency_key
-- since migration 0020): an unkeyed step's stay null, so its claim and completion remain HOT updates.
ALTER TABLE "palisade"."steps" ADD COLUMN "running_concurrency_key" text GENERATED ALWAYS AS (CASE WHEN status = 'running' THEN concurrency_key END) STORED;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "live_flow_name" text GENERATED ALWAYS AS (CASE WHEN status IN ('scheduled', 'running') AND (concurrency_key IS NOT NULL OR rate_key IS NOT NULL) THEN name END) STORED;--> statement-breakpoint
CREATE INDEX "steps_running_concurrency_key_idx" ON "palisade"."steps" USING btree ("name","running_concurrency_key") WHERE "palisade"."steps"."running_concurrency_key" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "steps_live_flow_name_idx" ON "palisade"."steps" USING btree ("live_flow_name") WHERE "palisade"."steps"."live_flow_name" IS NOT NULL;--> statement-breakpoint
-- Room on each page for a row's hot-path versions (claim, completion), so they are HOT updates: 30 measured 93 % HOT
-- of steps updates, against 71–76 % at 40 and 63 % at 50 (C3, 2,000 jobs at c = 10; STORAGE.md §4, step 4).
ALTER TABLE "palisade"."steps" SET (fillfactor = 30);
