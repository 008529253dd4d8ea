-- Two more events that only repeated a row the engine writes anyway are no longer stored (issue 12, fewer writes
-- per job): the `run_events` view reads them off the steps row, as it reads `attempt:claimed` and a job's
-- `run:completed` (0008):
-- - `step:completed` of an activity step: the step row is set `completed` once, by the fenced completion that
--   ended it (its nonce in `ended_nonce`; a completed step is never reset, not even by a retry of its run), at
--   `finished_at`, with the attempt, epoch, token and worker of the attempt that completed it;
-- - `step:scheduled` of a standalone job's step, at the step's `created_at`.
-- Rows stored before this migration are deleted where the view now derives the same event.
DELETE FROM "palisade"."events" e
 USING "palisade"."steps" s
 WHERE e.type = 'step:completed' AND s.id = e.step_id AND s.kind = 'activity' AND s.status = 'completed'
   AND s.ended_nonce IS NOT NULL;--> statement-breakpoint
DELETE FROM "palisade"."events" e
 USING "palisade"."runs" r
 WHERE e.type = 'step:scheduled' AND r.id = e.run_id AND r.kind = 'activity';--> statement-breakpoint
DROP VIEW "palisade"."run_events";--> statement-breakpoint
-- Ordered by (at, rank, ord): at one instant, a job's scheduling first, then what is stored (a step's scheduling,
-- which a turn's commit may grant in the same statement), then claims, then a step's completion, then a job's end.
CREATE VIEW "palisade"."run_events" AS
SELECT e.id::text AS id, e.run_id, e.step_id, e.type, e.attempt, e.epoch, e.fencing_token, e.worker_id, e.data,
       e.terminal, e.at, 1 AS rank, e.id AS ord
  FROM "palisade"."events" e
UNION ALL
SELECT 'scheduled:' || s.id::text, s.run_id, s.id, 'step:scheduled', NULL, NULL, NULL, NULL,
       jsonb_build_object('activity', s.name, 'queue', s.queue), false, s.created_at, 0, 0
  FROM "palisade"."steps" s
  JOIN "palisade"."runs" r ON r.id = s.run_id
 WHERE r.kind = 'activity'
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
SELECT 'completed:' || s.id::text, s.run_id, s.id, 'step:completed', s.attempt, s.epoch, s.fencing_token,
       s.worker_id, NULL, true, s.finished_at, 3, s.seq
  FROM "palisade"."steps" s
 WHERE s.kind = 'activity' AND s.status = 'completed' AND s.ended_nonce IS NOT NULL
UNION ALL
SELECT 'end:' || r.id::text, r.id, NULL, 'run:completed', NULL, NULL, NULL, NULL, NULL, true, r.finished_at, 4, 0
  FROM "palisade"."runs" r
 WHERE r.kind = 'activity' AND r.status = 'completed';
