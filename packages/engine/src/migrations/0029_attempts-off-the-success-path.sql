-- An activity's attempt is no longer a row from its claim on (issue 28 item 1, STORAGE.md §4 step 5a). A claim wrote
-- an attempts row (~400 B of WAL with its three index entries, C3) and the completion updated it (~110 B): a quarter
-- of a no-op job's WAL, for what the step row already says. Now the step row carries its current grant — the token,
-- nonce, epoch, attempt and worker it had, plus, new here, when it was claimed (`claimed_at`), the lease it was
-- granted (`granted_until`) and the token a reclaim took over (`reclaimed_from_token`) — and a row is written only
-- when a grant ends any other way than by its own completion: a failure, a release, an expiry taken over by a claim
-- or ended by the sweep, a cancel, a retirement, a stale write refused while the grant was still the step's. Those
-- rows, and every turn's (a run's next turn overwrites its turn grant), live in `attempt_records`, the table renamed;
-- `attempts` becomes the view of every attempt, so whoever read the table — describe(), `runs show`, the
-- `run_events` view, an operator's query — reads the same attempts as before.
ALTER TABLE "palisade"."attempts" RENAME TO "attempt_records";--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "claimed_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "granted_until" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "reclaimed_from_token" bigint;--> statement-breakpoint
-- The open attempts of running activities move onto their steps, so that the statements that end them now (which
-- record an ended grant by inserting its row) find them there. Every other attempts row stays as it was.
UPDATE "palisade"."steps" s
   SET claimed_at = a.claimed_at, granted_until = a.granted_until, reclaimed_from_token = a.reclaimed_from_token
  FROM "palisade"."attempt_records" a
 WHERE a.fencing_token = s.fencing_token AND a.step_id = s.id AND a.kind = 'activity' AND a.outcome IS NULL;--> statement-breakpoint
DELETE FROM "palisade"."attempt_records" a
 USING "palisade"."steps" s
 WHERE a.fencing_token = s.fencing_token AND a.step_id = s.id AND a.kind = 'activity' AND a.outcome IS NULL
   AND s.claimed_at IS NOT NULL;--> statement-breakpoint
-- Every attempt of every run: the rows of attempt_records (turns; activity attempts that ended other than by their
-- own completion; those recorded before this migration), and the current grant of each activity step that a claim made
-- and no row records — open while the step runs, `completed` once its own completion ended it (`ended_nonce`). `id`
-- is null for a grant read off its step; the fencing token orders a run's attempts as their grants were made.
CREATE VIEW "palisade"."attempts" AS
SELECT a.id, a.run_id, a.step_id, a.kind, a.attempt, a.epoch, a.fencing_token, a.nonce, a.worker_id, a.claimed_at,
       a.reclaimed_from_token, a.granted_until, a.ended_at, a.outcome, a.error
  FROM "palisade"."attempt_records" a
UNION ALL
SELECT NULL::bigint, s.run_id, s.id, 'activity', s.attempt, s.epoch, s.fencing_token, s.nonce, s.worker_id,
       s.claimed_at, s.reclaimed_from_token, s.granted_until,
       CASE WHEN s.status = 'completed' AND s.ended_nonce = s.nonce THEN s.finished_at END,
       CASE WHEN s.status = 'completed' AND s.ended_nonce = s.nonce THEN 'completed' END,
       NULL::jsonb
  FROM "palisade"."steps" s
 WHERE s.claimed_at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM "palisade"."attempt_records" x WHERE x.fencing_token = s.fencing_token);--> statement-breakpoint
DROP VIEW "palisade"."run_events";--> statement-breakpoint
-- As in migration 0023, but `attempt:claimed` read off the `attempts` view (its id and order: the claim's token, which
-- orders claims as the attempts row's id did; a claim event's id was `claim:<attempts id>` before this migration).
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
SELECT 'claim:' || a.fencing_token::text, a.run_id, a.step_id, 'attempt:claimed', a.attempt, a.epoch,
       a.fencing_token, a.worker_id,
       jsonb_build_object(
         'leaseExpiresAt', a.granted_until,
         'reclaimedFromToken', a.reclaimed_from_token::text,
         'previousAttemptEnded', prev.outcome),
       false, a.claimed_at, 2, a.fencing_token
  FROM "palisade"."attempts" a
  JOIN "palisade"."steps" s ON s.id = a.step_id
  LEFT JOIN "palisade"."attempt_records" prev ON prev.fencing_token = a.reclaimed_from_token
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
--> statement-breakpoint
-- The step row is 24 B wider (the three grant columns): fillfactor 40 (from 50, migration 0027) keeps a claim's and a
-- completion's versions on the page (HOT) and leaves room for the versions a held horizon keeps (STORAGE.md §4 step
-- 5a). Applies to pages filled from now on; no row is rewritten.
ALTER TABLE "palisade"."steps" SET (fillfactor = 40);
