-- A run's history as `runs show`, `describe()` and the tests read it: the stored events, plus the events that only
-- repeated a row the engine writes anyway and are no longer stored (issue 12, fewer writes per job):
-- - `attempt:claimed`, one per activity attempt, from the attempts row (`granted_until`, the end of the lease the
--   claim granted, is its `leaseExpiresAt`; a reclaim of an expired lease records the token it took over in
--   `reclaimed_from_token`, written with the row, and that attempt's outcome);
-- - `run:completed` of a standalone job, from its run row.
-- Ordered by (at, rank, ord): at one instant, what is stored first (a step's scheduling, which a turn's commit may
-- grant in the same statement), then claims, then a job's end.
ALTER TABLE "palisade"."attempts" ADD COLUMN "reclaimed_from_token" bigint;--> statement-breakpoint
ALTER TABLE "palisade"."attempts" ADD COLUMN "granted_until" timestamp with time zone;--> statement-breakpoint
-- A job's run row is updated twice (claimed, ended) and an attempt row once (ended): with no indexed column
-- changed and room left on the page, PostgreSQL makes these HOT updates, writing no index entry. `status` leaves
-- the runs' indexes for that (runs list filters it while reading by creation time), and pages keep room.
DROP INDEX "palisade"."runs_status_created_at_idx";--> statement-breakpoint
CREATE INDEX "runs_created_at_idx" ON "palisade"."runs" USING btree ("created_at");--> statement-breakpoint
ALTER TABLE "palisade"."runs" SET (fillfactor = 70);--> statement-breakpoint
ALTER TABLE "palisade"."attempts" SET (fillfactor = 80);--> statement-breakpoint
CREATE VIEW "palisade"."run_events" AS
SELECT e.id::text AS id, e.run_id, e.step_id, e.type, e.attempt, e.epoch, e.fencing_token, e.worker_id, e.data,
       e.terminal, e.at, 1 AS rank, e.id AS ord
  FROM "palisade"."events" e
UNION ALL
SELECT 'claim:' || a.id::text, a.run_id, a.step_id, 'attempt:claimed', a.attempt, a.epoch, a.fencing_token,
       a.worker_id,
       jsonb_build_object(
         'leaseExpiresAt', a.granted_until,
         'reclaimedFromToken', a.reclaimed_from_token::text,
         'previousAttemptEnded', prev.outcome),
       false, a.claimed_at, 2, a.id
  FROM "palisade"."attempts" a
  JOIN "palisade"."steps" s ON s.id = a.step_id
  LEFT JOIN "palisade"."attempts" prev ON prev.fencing_token = a.reclaimed_from_token
 WHERE a.kind = 'activity'
UNION ALL
SELECT 'end:' || r.id::text, r.id, NULL, 'run:completed', NULL, NULL, NULL, NULL, NULL, true, r.finished_at, 3, 0
  FROM "palisade"."runs" r
 WHERE r.kind = 'activity' AND r.status = 'completed';
