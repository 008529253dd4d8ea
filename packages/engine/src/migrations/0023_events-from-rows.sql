-- Events that only repeated a row the engine writes anyway are no longer stored (issue 28, item 4; STORAGE.md §4
-- step 2), as jobs' already are (0008, 0010): a three-step workflow stored five (~1.4 KB of WAL with their index
-- entries). The `run_events` view reads them off the rows:
-- - `run:started` of a workflow run, from its run row (its name, queue, parent, `created_at`), unless one is
--   stored: a delayed start (its `start_at` is in no row once the run has started), a schedule's run (deleting
--   the schedule clears the run's `schedule_id`; the event still names it), or a run from before this migration
--   whose stored event says anything else;
-- - `step:scheduled` of a workflow's activity step, from the step row, when it was due at once (granted eagerly,
--   or due at its `created_at`: `dueAt` is that time), unless one is stored: a step due later (its retired
--   predecessor's lease was still held) or inserted ended (the run ended first) stores its own;
-- - `run:completed` of a workflow run, from its run row (a completed run is never reset), unless one is stored.
-- `timer:started`, `signal:waiting` and `child:started` stay stored (a timer's due time and whether a child was
-- started are in no row once the step ends), and so does `timer:fired` (at the commit's clock, which no row keeps).
-- Where both could exist, the view prefers the stored event, so a run shows each event once whatever wrote it.
--
-- Order at one instant (one statement): the turn commit's step events are inserted after its other events (its
-- data-modifying CTEs run last-defined first), in position order; its grants (claims, rank 2) and the run's end
-- (rank 4) follow. A step's scheduling event, stored or derived, therefore sorts by (at, rank 1, 2^62 + seq): after
-- every stored event of its statement (ids stay far below 2^62), in position order, as when all were stored. A
-- derived `run:started` is the first event of its run (rank 0), as a job's derived scheduling event is.
--
-- The foreign key of `events` to `runs` goes (its check took a key-share lock on the run row, a WAL record, for
-- every event insert): an event is inserted only by a statement that has just inserted or locked its run, and
-- pruning deletes a run's events itself (prune-runs.ts), as it does its steps and attempts since 0011.
ALTER TABLE "palisade"."events" DROP CONSTRAINT "events_run_id_runs_id_fk";--> statement-breakpoint
-- Stored events the view now derives, deleted where the row says exactly the same (a run in flight shows each
-- event once, before and after this migration, and keeps what it showed).
DELETE FROM "palisade"."events" e
 USING "palisade"."runs" r
 WHERE e.type = 'run:started' AND e.step_id IS NULL AND r.id = e.run_id AND r.kind = 'workflow'
   AND e.at = r.created_at
   AND e.data = jsonb_build_object('workflow', r.name, 'queue', r.queue)
                || CASE WHEN r.parent_run_id IS NOT NULL
                        THEN jsonb_build_object('parentRunId', r.parent_run_id::text) ELSE '{}'::jsonb END;--> statement-breakpoint
DELETE FROM "palisade"."events" e
 USING "palisade"."steps" s, "palisade"."runs" r
 WHERE e.type = 'step:scheduled' AND s.id = e.step_id AND r.id = s.run_id AND r.kind = 'workflow'
   AND s.kind = 'activity' AND e.run_id = s.run_id AND e.at = s.created_at
   AND e.data - 'dueAt' = jsonb_build_object('name', s.name, 'seq', s.seq)
   AND jsonb_typeof(e.data->'dueAt') = 'string' AND (e.data->>'dueAt')::timestamptz = s.created_at;--> statement-breakpoint
DELETE FROM "palisade"."events" e
 USING "palisade"."runs" r
 WHERE e.type = 'run:completed' AND e.step_id IS NULL AND r.id = e.run_id AND r.kind = 'workflow'
   AND r.status = 'completed' AND e.at = r.finished_at AND e.data IS NULL;--> statement-breakpoint
DROP VIEW "palisade"."run_events";--> statement-breakpoint
-- Ordered by (at, rank, ord): at one instant, a run's start and a job's scheduling first, then what is stored,
-- then a workflow step's scheduling (stored or derived) in position order, then claims, then a step's completion,
-- then a run's end.
CREATE VIEW "palisade"."run_events" AS
SELECT e.id::text AS id, e.run_id, e.step_id, e.type, e.attempt, e.epoch, e.fencing_token, e.worker_id, e.data,
       e.terminal, e.at,
       CASE WHEN e.step_id IS NULL AND e.type IN ('run:completed', 'run:failed', 'run:cancelled') THEN 4 ELSE 1 END
         AS rank,
       CASE WHEN e.step_id IS NOT NULL AND e.type IN ('step:scheduled', 'timer:started', 'signal:waiting', 'child:started')
                 AND jsonb_typeof(e.data->'seq') = 'number'
            THEN 4611686018427387904 + (e.data->>'seq')::bigint
            ELSE e.id END AS ord
  FROM "palisade"."events" e
UNION ALL
SELECT 'started:' || r.id::text, r.id, NULL, 'run:started', NULL, NULL, NULL, NULL,
       jsonb_build_object('workflow', r.name, 'queue', r.queue)
         || CASE WHEN r.parent_run_id IS NOT NULL
                 THEN jsonb_build_object('parentRunId', r.parent_run_id::text) ELSE '{}'::jsonb END,
       false, r.created_at, 0, 0
  FROM "palisade"."runs" r
 WHERE r.kind = 'workflow'
   AND NOT EXISTS (SELECT 1 FROM "palisade"."events" x
                    WHERE x.run_id = r.id AND x.type = 'run:started' AND x.step_id IS NULL)
UNION ALL
SELECT 'scheduled:' || s.id::text, s.run_id, s.id, 'step:scheduled', NULL, NULL, NULL, NULL,
       jsonb_build_object('activity', s.name, 'queue', s.queue), false, s.created_at, 0, 0
  FROM "palisade"."steps" s
  JOIN "palisade"."runs" r ON r.id = s.run_id
 WHERE r.kind = 'activity'
UNION ALL
SELECT 'scheduled:' || s.id::text, s.run_id, s.id, 'step:scheduled', NULL, NULL, NULL, NULL,
       jsonb_build_object('name', s.name, 'seq', s.seq, 'dueAt', s.created_at), false, s.created_at, 1,
       4611686018427387904 + s.seq
  FROM "palisade"."steps" s
  JOIN "palisade"."runs" r ON r.id = s.run_id
 WHERE r.kind = 'workflow' AND s.kind = 'activity'
   AND NOT EXISTS (SELECT 1 FROM "palisade"."events" x
                    WHERE x.run_id = s.run_id AND x.step_id = s.id AND x.type = 'step:scheduled')
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
 WHERE r.status = 'completed'
   AND (r.kind = 'activity'
        OR NOT EXISTS (SELECT 1 FROM "palisade"."events" x
                        WHERE x.run_id = r.id AND x.type = 'run:completed' AND x.step_id IS NULL));
