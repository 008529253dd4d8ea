-- Issue 28 item 3: scheduling a workflow's next turn no longer rewrites the run's indexes. The turn claim's order
-- lived in two indexes of `runs` keyed on `turn_next_run_at`, so every statement that moved a turn's due time (a
-- start, a claim, a commit, a step's end waking the run, a signal, a cancel, a child's end, a retry) was a non-HOT
-- update writing an entry in every index of `runs`. The claimable turns now live in `turn_queue`, a narrow table of
-- their own with one index in claim order, inserted, moved and deleted; `turn_next_run_at` stays on the run,
-- unindexed, so those updates of `runs` are HOT (STORAGE.md §3.2).
--
-- A run has one `turn_queue` row exactly while it is a live workflow run (pending or running) with its turn due
-- now or later, or held under a lease: `due_at` is the later of `turn_next_run_at` and the turn lease's end
-- (`turn_queue_due`). Triggers on `runs` keep it so, in the statement that writes the run row and under that row's
-- lock, so no path that moves a turn (nor a test or an operator writing the row by hand) can forget the queue. The
-- queue is scheduling state only: the claim re-checks every row it picks on the locked run row (claim-turns.ts).
CREATE TABLE "palisade"."turn_queue" (
	"queue" text NOT NULL,
	"priority" integer NOT NULL,
	"due_at" timestamp with time zone NOT NULL,
	"run_id" uuid NOT NULL,
	"name" text NOT NULL
);
--> statement-breakpoint
-- The claim's order (priority, then due time), and with run_id the whole key of a row: the triggers find the row of
-- a run by its key, so the table needs no second index.
CREATE INDEX "turn_queue_claim_order_idx" ON "palisade"."turn_queue" USING btree ("queue","priority" DESC NULLS FIRST,"due_at","run_id");
--> statement-breakpoint
-- The due time of a run's `turn_queue` row, or NULL when it has none: a live workflow run with a turn due (or
-- held: then the lease's end, when a claim may take the turn over).
CREATE FUNCTION "palisade"."turn_queue_due"(kind text, status text, next_run_at timestamptz, lease_expires_at timestamptz)
  RETURNS timestamptz
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN kind = 'workflow' AND status IN ('pending', 'running') AND next_run_at IS NOT NULL
                    THEN greatest(next_run_at, lease_expires_at) END $$;
--> statement-breakpoint
-- Keeps `turn_queue` in step with the run row written: the row of the old version (found by its whole key) is moved
-- to the new version's key, deleted when the new version has none, inserted when the old had none. A row the key
-- does not find (only a hand-edited or torn queue: the claim deletes such stale rows when it meets them) is
-- inserted anew.
CREATE FUNCTION "palisade"."sync_turn_queue"() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
  DECLARE
    old_due timestamptz;
    new_due timestamptz;
  BEGIN
    IF TG_OP <> 'INSERT' THEN
      old_due := "palisade"."turn_queue_due"(OLD.kind, OLD.status, OLD.turn_next_run_at, OLD.turn_lease_expires_at);
    END IF;
    IF TG_OP <> 'DELETE' THEN
      new_due := "palisade"."turn_queue_due"(NEW.kind, NEW.status, NEW.turn_next_run_at, NEW.turn_lease_expires_at);
    END IF;
    IF old_due IS NOT NULL THEN
      IF new_due IS NULL THEN
        DELETE FROM "palisade"."turn_queue"
         WHERE queue = OLD.queue AND priority = OLD.priority AND due_at = old_due AND run_id = OLD.id;
        RETURN NULL;
      END IF;
      UPDATE "palisade"."turn_queue" SET queue = NEW.queue, priority = NEW.priority, due_at = new_due, name = NEW.name
       WHERE queue = OLD.queue AND priority = OLD.priority AND due_at = old_due AND run_id = OLD.id;
      IF FOUND THEN
        RETURN NULL;
      END IF;
    END IF;
    IF new_due IS NOT NULL THEN
      INSERT INTO "palisade"."turn_queue" (queue, priority, due_at, run_id, name)
      VALUES (NEW.queue, NEW.priority, new_due, NEW.id, NEW.name);
    END IF;
    RETURN NULL;
  END
  $$;
--> statement-breakpoint
-- The WHEN clauses call the function only for rows whose queue row changes: an update that leaves the due time,
-- queue, priority and name of a run's turn as they were (a job's claim and completion, a turn's progress) costs
-- nothing here. They spell `turn_queue_due` out: a SQL function in a trigger's WHEN is inlined anew for every
-- statement, which doubled the trigger's cost per row in a micro-benchmark (STORAGE.md, step 4b).
CREATE TRIGGER "runs_turn_queue_insert" AFTER INSERT ON "palisade"."runs"
  FOR EACH ROW
  WHEN ((CASE WHEN NEW.kind = 'workflow' AND NEW.status IN ('pending', 'running') AND NEW.turn_next_run_at IS NOT NULL
             THEN greatest(NEW.turn_next_run_at, NEW.turn_lease_expires_at) END) IS NOT NULL)
  EXECUTE FUNCTION "palisade"."sync_turn_queue"();
--> statement-breakpoint
CREATE TRIGGER "runs_turn_queue_update"
  AFTER UPDATE OF status, queue, priority, name, turn_next_run_at, turn_lease_expires_at ON "palisade"."runs"
  FOR EACH ROW
  WHEN ((CASE WHEN OLD.kind = 'workflow' AND OLD.status IN ('pending', 'running') AND OLD.turn_next_run_at IS NOT NULL
             THEN greatest(OLD.turn_next_run_at, OLD.turn_lease_expires_at) END)
          IS DISTINCT FROM (CASE WHEN NEW.kind = 'workflow' AND NEW.status IN ('pending', 'running') AND NEW.turn_next_run_at IS NOT NULL
             THEN greatest(NEW.turn_next_run_at, NEW.turn_lease_expires_at) END)
        OR (NEW.turn_next_run_at IS NOT NULL
            AND (OLD.queue, OLD.priority, OLD.name) IS DISTINCT FROM (NEW.queue, NEW.priority, NEW.name)))
  EXECUTE FUNCTION "palisade"."sync_turn_queue"();
--> statement-breakpoint
CREATE TRIGGER "runs_turn_queue_delete" AFTER DELETE ON "palisade"."runs"
  FOR EACH ROW
  WHEN ((CASE WHEN OLD.kind = 'workflow' AND OLD.status IN ('pending', 'running') AND OLD.turn_next_run_at IS NOT NULL
             THEN greatest(OLD.turn_next_run_at, OLD.turn_lease_expires_at) END) IS NOT NULL)
  EXECUTE FUNCTION "palisade"."sync_turn_queue"();
--> statement-breakpoint
-- The turns in flight at the upgrade: due ones, sleeping timers, held leases (due at the lease's end, when a claim
-- takes the turn over with a larger token, exactly as before).
INSERT INTO "palisade"."turn_queue" (queue, priority, due_at, run_id, name)
SELECT queue, priority, "palisade"."turn_queue_due"(kind, status, turn_next_run_at, turn_lease_expires_at), id, name
  FROM "palisade"."runs"
 WHERE "palisade"."turn_queue_due"(kind, status, turn_next_run_at, turn_lease_expires_at) IS NOT NULL;
--> statement-breakpoint
DROP INDEX "palisade"."runs_turn_due_idx";
--> statement-breakpoint
DROP INDEX "palisade"."runs_turn_claim_order_idx";
--> statement-breakpoint
-- Room on each page for a run's hot-path versions, so that its updates stay HOT (STORAGE.md §3.1, C7). Applies to
-- pages filled from now on.
ALTER TABLE "palisade"."runs" SET (fillfactor = 40);
