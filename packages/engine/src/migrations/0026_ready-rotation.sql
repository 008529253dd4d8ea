-- The rotation of ready (issue 28, STORAGE.md §3.6 and §4 step 6). Under a held MVCC horizon nothing removes the
-- dead versions a claim, a heartbeat or a completion leaves in ready, and a claim's scan walks every one of them
-- that is already due: with one partition the walk grows with the work done under the horizon. Four slots now
-- take turns: new rows go to the current slot (the column's default reads ready_ring); a row's moves (claim,
-- heartbeat) are UPDATEs in the partition it is in; and ready_rotate() empties the oldest slot — its live rows
-- moved to the current one, then TRUNCATE, which needs no horizon — and makes it current. A claim then walks at
-- most the dead entries written in the last four periods, whatever the horizon's age.
CREATE TABLE "palisade"."ready_1" PARTITION OF "palisade"."ready" FOR VALUES IN (1);--> statement-breakpoint
CREATE TABLE "palisade"."ready_2" PARTITION OF "palisade"."ready" FOR VALUES IN (2);--> statement-breakpoint
CREATE TABLE "palisade"."ready_3" PARTITION OF "palisade"."ready" FOR VALUES IN (3);--> statement-breakpoint
-- One row: the slot new ready rows go to, and when it became current (clock_timestamp, the server's own clock:
-- rotation is pacing, not a lease, and time travel in tests must not make it run).
CREATE TABLE "palisade"."ready_ring" (
	"id" boolean PRIMARY KEY DEFAULT true CHECK ("id"),
	"current_slot" smallint NOT NULL CHECK ("current_slot" BETWEEN 0 AND 3),
	"rotated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
INSERT INTO "palisade"."ready_ring" ("current_slot", "rotated_at") VALUES (0, clock_timestamp());--> statement-breakpoint
CREATE FUNCTION "palisade"."ready_slot"() RETURNS smallint
  LANGUAGE sql STABLE AS $$ SELECT current_slot FROM "palisade"."ready_ring" $$;
--> statement-breakpoint
-- Every insert into ready (the steps_ready_* triggers, the claim's correction of a stale row, a hand-written row)
-- names no slot and so lands in the current one. A row inserted with an older slot's number (a transaction that
-- read the ring before a rotation committed) is still moved before that slot is emptied: the rotation empties a
-- partition only under its ACCESS EXCLUSIVE lock, after moving whatever it then holds.
ALTER TABLE "palisade"."ready" ALTER COLUMN "slot" SET DEFAULT "palisade"."ready_slot"();--> statement-breakpoint
-- One rotation, if it is due: returns 'rotated', 'busy' (another session is rotating), 'early' (the current slot
-- became current less than min_interval_ms ago, or holds less than min_bytes of heap: too little churn to be worth
-- it) or 'locked' (the oldest slot's ACCESS EXCLUSIVE lock was not granted within the function's lock_timeout:
-- nothing changed). Statements that touch ready name no slot, so each locks every partition: a TRUNCATE waiting
-- for a long transaction would queue every claim behind it. lock_timeout bounds that wait (and so a claim's) to
-- 50 ms; a skipped rotation is retried at the next call.
--
-- Order: the ring row FOR UPDATE SKIP LOCKED (one rotator); the oldest slot's rows nobody holds, locked SKIP LOCKED
-- and moved to the current slot while claims go on; then LOCK TABLE on the oldest partition, the rows left there
-- (written or released meanwhile) moved, TRUNCATE, the ring advanced. The moves and the lock are one
-- subtransaction: if the lock is refused all of it is undone, so a statement that was waiting for a row the move
-- had locked (a trigger moving a step's row, which holds a lock on the partition and so is why the lock was
-- refused) finds the row where it was. Once the lock is held no other session has a lock on the partition, so no
-- row can be in flight into or out of it: nothing is lost. deadlock_timeout (1 s) is longer than lock_timeout, so
-- the waiter never sees a deadlock error: the rotation gives up first.
CREATE FUNCTION "palisade"."ready_rotate"(min_interval_ms integer, min_bytes bigint) RETURNS text
  LANGUAGE plpgsql SET lock_timeout = '50ms' AS $$
DECLARE
  ring record;
  oldest smallint;
  part text;
BEGIN
  SELECT current_slot, rotated_at INTO ring FROM "palisade"."ready_ring" FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN RETURN 'busy'; END IF;
  IF ring.rotated_at > clock_timestamp() - make_interval(secs => min_interval_ms / 1000.0)
     OR pg_relation_size(format('"palisade".%I', 'ready_' || ring.current_slot)::regclass) < min_bytes THEN
    RETURN 'early';
  END IF;
  oldest := (ring.current_slot + 1) % 4;
  part := format('"palisade".%I', 'ready_' || oldest);
  BEGIN
    EXECUTE format(
      'WITH moved AS (DELETE FROM %s r WHERE r.ctid = ANY (ARRAY(SELECT ctid FROM %s FOR UPDATE SKIP LOCKED))
                      RETURNING r.queue, r.priority, r.due_at, r.name, r.step_id, r.run_id, r.expiring)
       INSERT INTO "palisade"."ready" (slot, queue, priority, due_at, name, step_id, run_id, expiring)
       SELECT $1, queue, priority, due_at, name, step_id, run_id, expiring FROM moved', part, part)
      USING ring.current_slot;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', part);
    EXECUTE format(
      'INSERT INTO "palisade"."ready" (slot, queue, priority, due_at, name, step_id, run_id, expiring)
       SELECT $1, queue, priority, due_at, name, step_id, run_id, expiring FROM %s', part)
      USING ring.current_slot;
    EXECUTE format('TRUNCATE %s', part);
  EXCEPTION WHEN lock_not_available THEN
    RETURN 'locked';
  END;
  UPDATE "palisade"."ready_ring" SET current_slot = oldest, rotated_at = clock_timestamp();
  RETURN 'rotated';
END
$$;
