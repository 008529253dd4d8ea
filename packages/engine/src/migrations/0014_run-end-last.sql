-- A run's end is the last of its events at its instant (issue 13, `handle.watch()` ends on it): the statement
-- that ends a run writes its other events of that instant (a timer fired, a signal received, steps cancelled with
-- the run) in the same statement, with ids in no set order among them. The stored run endings take rank 4, the
-- rank a job's derived end already has; the rest is the view of 0010 as it was. The rank rests on the type, which
-- never changes (a retry only clears `terminal`), so a watch's cursor keeps its place.
DROP VIEW "palisade"."run_events";--> statement-breakpoint
-- Ordered by (at, rank, ord): at one instant, a job's scheduling first, then what is stored (a step's scheduling,
-- which a turn's commit may grant in the same statement), then claims, then a step's completion, then a run's end.
CREATE VIEW "palisade"."run_events" AS
SELECT e.id::text AS id, e.run_id, e.step_id, e.type, e.attempt, e.epoch, e.fencing_token, e.worker_id, e.data,
       e.terminal, e.at,
       CASE WHEN e.step_id IS NULL AND e.type IN ('run:completed', 'run:failed', 'run:cancelled') THEN 4 ELSE 1 END
         AS rank,
       e.id AS ord
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
