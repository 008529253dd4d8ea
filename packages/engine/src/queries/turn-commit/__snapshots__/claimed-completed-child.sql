-- claimed-completed-child: a run that starts a child and returns without awaiting it: the child step ends with the run

    WITH -- A run that ends completes its parent's child step and wakes the parent: the parent's run row is locked
    -- first, before this run's (an ancestor before its descendants, as a cancel that cascades locks them).
    parent_lk AS MATERIALIZED (
      SELECT p.id FROM "palisade"."runs" p
       WHERE p.id = (SELECT c.parent_run_id FROM "palisade"."runs" c WHERE c.id = $1::uuid)
         FOR NO KEY UPDATE OF p),
    lk AS MATERIALIZED (
      SELECT r.id, r.queue, r.status, r.turn_token, r.turn_nonce, r.turn_lease_expires_at, r.turn_epoch,
             r.turn_attempt, r.turn_worker_id, r.wake_count, r.turn_next_run_at,
             r.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM "palisade"."runs" r
       WHERE r.id = $2::uuid AND (SELECT count(*) FROM parent_lk) >= 0
         FOR NO KEY UPDATE OF r),
    -- The turn's lease is judged by the clock read once the run row is locked: read before a wait on a row
    -- another statement only locked (no recheck follows), it would pass a lease that ran out meanwhile.
    lock_clock AS MATERIALIZED (SELECT "palisade"."now"() AS t FROM (SELECT count(*) FROM lk) x),
    fence AS MATERIALIZED (
      SELECT lk.* FROM lk
       WHERE lk.turn_token = $3::bigint AND lk.turn_nonce = $4::uuid
         AND lk.turn_lease_expires_at > (SELECT t FROM lock_clock) AND lk.status IN ('pending', 'running')),
    -- The outcomes delivered, each by step id; a wait recorded by a turn of a kept instance (which does not know
    -- its id) by its position, as the live step there.
    dl AS MATERIALIZED (
      SELECT x.id AS id, x.delivered_seq, x.fires_timer, x.signal_id
        FROM jsonb_to_recordset($5::jsonb)
             AS x(id uuid, seq int, delivered_seq int, fires_timer boolean, signal_id bigint) LIMIT 1),
    -- Then the steps this commit changes, by id, each as its newest version (a claim that committed while the
    -- statement waited is seen as running; one that comes later skips the locked row).
    locked AS MATERIALIZED (
      SELECT s.id, s.status, s.fencing_token, s.nonce, s.lease_expires_at FROM "palisade"."steps" s
       WHERE s.run_id = $6::uuid AND EXISTS (SELECT 1 FROM fence)
         AND (s.id = ANY($7::uuid[])
              OR ($8 AND s.status IN ('scheduled', 'running') AND s.retired_at IS NULL))
       ORDER BY s.id FOR NO KEY UPDATE OF s),
    -- The signals the turn hands to waits, locked after the steps (newest versions): still pending, or the commit
    -- conflicts (a retry, or a turn whose snapshot was older than a commit that took them, ran again).

    -- The clock read once the commit's locks are held: a fused step's completion is judged and written at it; every
    -- other write of the commit reads clock, which is the same but for a fused step, whose turn comes after its
    -- completion (a microsecond later at least, so that a run's events order the completion first).
    step_clock AS MATERIALIZED (SELECT "palisade"."now"() AS t FROM (SELECT count(*) FROM locked) x),
    clock AS MATERIALIZED (
      SELECT t AS t FROM step_clock),
    gate AS MATERIALIZED (
      SELECT f.id, f.queue,
             (f.cancel_requested AND $9)
             OR EXISTS (SELECT 1 FROM dl LEFT JOIN locked l ON l.id = dl.id
                         WHERE (dl.fires_timer OR dl.signal_id IS NOT NULL) AND l.status IS DISTINCT FROM 'scheduled')
             
             -- A run's end marks every signal still pending undelivered, as this statement's snapshot has them: a
             -- signal whose sender held the run row while the statement started is not in it (its wake_count is in
             -- the locked row, not in the snapshot's). The turn runs again, and its commit sees the signal.
             OR f.wake_count <> (SELECT r.wake_count FROM "palisade"."runs" r WHERE r.id = $10::uuid) AS conflict
        FROM fence f),
    -- Every write of the commit waits for go, and go for every lock of locked (step_clock counts them): no write
    -- may lock a step before the steps locked here are all held, in id order (seen: deadlocks with heartbeats when
    -- the deliveries were marked before the run's other live steps were locked).
    go AS MATERIALIZED (
      SELECT id, queue FROM gate WHERE NOT conflict AND (SELECT t FROM step_clock) IS NOT NULL AND true),
    ns AS (
      SELECT * FROM jsonb_to_recordset($11::jsonb) AS x(
        seq int, kind text, name text, after_delivered_seq int, status text, delivered_seq int, error jsonb, input jsonb, output jsonb,
        queue text, priority int, retry_policy jsonb, lease_ms int, start_to_close_timeout_ms int,
        delay_ms float8, due_at_ms float8, signal_id bigint, concurrency_key text, concurrency_limit int,
        rate_key text, rate_limit int, rate_period_ms int) LIMIT 1),
    -- A position a retry retired and the code now schedules again is the same unit of work (invariant 13):
    -- the new row takes the retired rows' fencing scope and highest epoch, and is not due before the lease of
    -- an attempt that may still hold one of them (ended by the retirement, not by itself) runs out.
    prev AS (
      SELECT p.seq, (array_agg(p.fencing_scope ORDER BY p.created_at))[1] AS fencing_scope, max(p.epoch) AS epoch,
             max(p.lease_expires_at) FILTER (WHERE p.ended_nonce IS DISTINCT FROM p.nonce) AS held_until
        FROM "palisade"."steps" p
       WHERE p.run_id = $12::uuid AND p.retired_at IS NOT NULL AND p.seq IN (SELECT seq FROM ns)
       GROUP BY p.seq),
    -- Eager dispatch: the new activities this worker serves, as many as it has slots for, are granted to it
    -- here, as a claim grants (claimSteps): attempt 1, epoch + 1, a fresh token from the global sequence, a
    -- fresh nonce, a lease from the database clock capped by the attempt deadline, an attempts row. Not a
    -- position whose retired predecessor may still be held (it is not due before that lease ends), and nothing
    -- when the turn ends the run.
    eager_sel AS MATERIALIZED (
      SELECT ns.seq FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE NOT $13 AND ns.kind = 'activity' AND ns.status = 'scheduled'
         AND ns.name IN (SELECT jsonb_array_elements_text($14::jsonb))
         AND ns.queue IN (SELECT jsonb_array_elements_text($15::jsonb))
         AND (prev.held_until IS NULL OR prev.held_until <= (SELECT t FROM clock))
         -- Not a step under a concurrency key or a rate limit: only a claim admits those (flow-control.ts).
         AND ns.concurrency_key IS NULL AND ns.rate_key IS NULL
       ORDER BY ns.seq
       LIMIT $16),
    -- A child whose key names an existing run of its workflow. The run this very parent started at this very
    -- position (its step there retired by a retry of the parent, and the code, replayed, starts the child again) is
    -- its own earlier child, as a Temporal reset re-runs it: one that failed or was cancelled gives its key to a
    -- new child run (Temporal's default workflow-id reuse: a closed run's id may start anew), kept itself as a run
    -- of the parent's history; one still pending or running becomes the child of the new step (its end completes
    -- it); one that completed completes the new step with its output at once. Any other run keeps its key and the
    -- child is not started: its step fails (the code sees a ChildWorkflowFailure naming that run at its next turn).
    key_holders AS MATERIALIZED (
      SELECT x.seq, r.id AS run_id,
             r.parent_run_id = $17::uuid
               AND EXISTS (SELECT 1 FROM "palisade"."steps" o
                            WHERE o.id = r.parent_step_id AND o.run_id = $18::uuid AND o.seq = x.seq
                              AND o.retired_at IS NOT NULL) AS own
        FROM ns x
        JOIN "palisade"."runs" r ON r.kind = 'workflow' AND r.name = x.name AND r.idempotency_key = x.input->>'key'
       WHERE x.kind = 'child' AND x.status = 'running'),
    -- Its own children locked (after the parent's rows: an ancestor before its descendants), each as its newest
    -- version: one that ended while this statement waited for the parent's lock is seen ended.
    own_locked AS MATERIALIZED (
      SELECT r.id, r.status, r.output FROM "palisade"."runs" r
       WHERE r.id IN (SELECT run_id FROM key_holders WHERE own)
       ORDER BY r.id FOR NO KEY UPDATE OF r),
    child_keys AS MATERIALIZED (
      SELECT h.seq, h.run_id, h.own, l.status, l.output
        FROM key_holders h LEFT JOIN own_locked l ON l.id = h.run_id
       -- An own child pruned meanwhile holds no key any more.
       WHERE NOT h.own OR l.id IS NOT NULL),
    planned AS (
      SELECT ns.*, prev.fencing_scope AS prev_scope, prev.epoch AS prev_epoch, prev.held_until,
             ns.seq IN (SELECT seq FROM eager_sel) AS eager,
             (SELECT k.run_id::text FROM child_keys k WHERE k.seq = ns.seq AND NOT k.own) AS key_taken_by,
             (SELECT k.run_id FROM child_keys k
                        WHERE k.seq = ns.seq AND k.own AND k.status NOT IN ('failed', 'cancelled')) AS reused_run_id,
             (SELECT k.output FROM child_keys k WHERE k.seq = ns.seq AND k.own AND k.status = 'completed') AS reused_output,
             EXISTS (SELECT 1 FROM child_keys k WHERE k.seq = ns.seq AND k.own AND k.status = 'completed') AS reused_completed,
             -- A step the run's end cancels with the run's other live steps (a child it would start: not started).
             $19 AND (ns.status = 'scheduled' OR (ns.kind = 'child' AND ns.status = 'running')) AS ends_with_run,
             CASE WHEN 1 >= (ns.retry_policy->>'maximumAttempts')::int THEN 0
                  ELSE "palisade"."retry_delay_ms"(ns.retry_policy, 1) END AS first_reclaim_delay_ms,
             -- Its options as a policies row (inserted by policies_made when new), and its attempts budget.
             "palisade"."policy_id"(ns.retry_policy, ns.lease_ms, ns.start_to_close_timeout_ms) AS policy_id,
             (ns.retry_policy->>'maximumAttempts')::int AS max_attempts
        FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE EXISTS (SELECT 1 FROM go)),
    policies_made AS (
      INSERT INTO "palisade"."policies" (id, retry_policy, lease_ms, start_to_close_timeout_ms)
      SELECT DISTINCT "palisade"."policy_id"(x.retry_policy, x.lease_ms, x.start_to_close_timeout_ms), x.retry_policy, x.lease_ms,
             x.start_to_close_timeout_ms
        FROM (SELECT retry_policy, lease_ms, start_to_close_timeout_ms FROM planned) x
       ORDER BY 1
      ON CONFLICT (id) DO NOTHING
      RETURNING 1),
    inserted AS (
      INSERT INTO "palisade"."steps" (run_id, seq, kind, name, fencing_scope, epoch, after_delivered_seq, status,
                              delivered_seq, error, input, output, queue, priority, policy_id, max_attempts,
                              next_run_at, finished_at, cancel_requested_at, created_at,
                              attempt, fencing_token, nonce, worker_id, attempt_deadline_at, lease_expires_at,
                              reclaim_delay_ms, started_at, claimed_at, granted_until, concurrency_key,
                              concurrency_limit, rate_key, rate_limit, rate_period_ms)
      SELECT $20::uuid, p.seq, p.kind, p.name,
             coalesce(p.prev_scope, $21 || p.seq::text),
             coalesce(p.prev_epoch, 0) + CASE WHEN p.eager THEN 1 ELSE 0 END,
             p.after_delivered_seq,
             CASE WHEN p.eager THEN 'running' WHEN p.ends_with_run THEN 'cancelled'
                  WHEN p.key_taken_by IS NOT NULL THEN 'failed' WHEN p.reused_completed THEN 'completed'
                  ELSE p.status END,
             p.delivered_seq,
             CASE WHEN p.key_taken_by IS NOT NULL
                  THEN jsonb_build_object(
                         'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', p.key_taken_by,
                         'message', 'child workflow ' || p.name || ' was not started: run ' || p.key_taken_by
                                    || ' of that workflow has its key ' || (p.input->>'key'),
                         'cause', jsonb_build_object(
                           'type', 'RunKeyConflict', 'nonRetryable', true,
                           'message', 'run ' || p.key_taken_by || ' has key ' || (p.input->>'key')))
                  ELSE p.error END,
             -- A child step records the run it waits for: its own earlier child when it takes that one again.
             CASE WHEN p.reused_run_id IS NOT NULL AND NOT p.ends_with_run
                  THEN jsonb_set(p.input, '{runId}', to_jsonb(p.reused_run_id::text)) ELSE p.input END,
             CASE WHEN p.reused_completed AND NOT p.ends_with_run THEN p.reused_output ELSE p.output END,
             coalesce(p.queue, (SELECT queue FROM go)), p.priority,
             p.policy_id, p.max_attempts,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ((least(p.lease_ms, p.start_to_close_timeout_ms) + p.first_reclaim_delay_ms) * interval '1 millisecond')
                  WHEN p.status <> 'scheduled' OR p.ends_with_run THEN NULL
                  ELSE greatest(CASE WHEN p.due_at_ms IS NOT NULL THEN to_timestamp(p.due_at_ms / 1000.0)
                                     WHEN p.delay_ms IS NOT NULL THEN (SELECT t FROM clock) + ((p.delay_ms) * interval '1 millisecond') END,
                                p.held_until) END,
             CASE WHEN p.delivered_seq IS NOT NULL AND NOT p.ends_with_run AND p.key_taken_by IS NULL THEN ('epoch'::timestamptz + (($22::bigint) * interval '1 millisecond'))
                  WHEN p.status NOT IN ('scheduled', 'running') OR p.ends_with_run OR p.key_taken_by IS NOT NULL
                       OR p.reused_completed
                  THEN (SELECT t FROM clock) END,
             CASE WHEN p.ends_with_run THEN (SELECT t FROM clock) END,
             (SELECT t FROM clock),
             CASE WHEN p.eager THEN 1 ELSE 0 END,
             CASE WHEN p.eager THEN nextval('"palisade"."fencing_token_seq"') END,
             CASE WHEN p.eager THEN gen_random_uuid() END,
             CASE WHEN p.eager THEN $23 END,
             CASE WHEN p.eager THEN (SELECT t FROM clock) + ((p.start_to_close_timeout_ms) * interval '1 millisecond') END,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ((least(p.lease_ms, p.start_to_close_timeout_ms)) * interval '1 millisecond') END,
             CASE WHEN p.eager THEN p.first_reclaim_delay_ms ELSE 0 END,
             CASE WHEN p.eager THEN (SELECT t FROM clock) END,
             -- An eager grant's attempt, read off the step until it ends other than by its completion (migration
             -- 0029): claimed now, with the lease above.
             CASE WHEN p.eager THEN (SELECT t FROM clock) END,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ((least(p.lease_ms, p.start_to_close_timeout_ms)) * interval '1 millisecond') END,
             p.concurrency_key, p.concurrency_limit, p.rate_key, p.rate_limit, p.rate_period_ms
        FROM planned p
      RETURNING id, seq, kind, name, status, queue, priority, error, next_run_at, input, attempt, epoch, fencing_token, nonce,
                lease_expires_at, fencing_scope, started_at,
                -- Cancelled with the run (a step the code saw cancelled carries its stored error).
                status = 'cancelled' AND error IS NULL AS ended_with_run),

    scheduled_events AS (
      INSERT INTO "palisade"."events" (run_id, step_id, type, data, at)
      SELECT $24::uuid, id,
             CASE kind WHEN 'timer' THEN 'timer:started' WHEN 'signal' THEN 'signal:waiting'
                       WHEN 'child' THEN 'child:started' ELSE 'step:scheduled' END,
             CASE WHEN kind = 'child' THEN jsonb_build_object('name', name, 'seq', seq, 'childRunId', input->>'runId')
                  -- When it is due: a step granted at once is due now (its next_run_at is when the grant's lease
                  -- lets it be reclaimed: that is its attempt:claimed event's leaseExpiresAt, not a due time).
                  ELSE jsonb_build_object('name', name, 'seq', seq,
                                          'dueAt', CASE WHEN status = 'running' THEN started_at ELSE next_run_at END) END,
             (SELECT t FROM clock)
        FROM inserted
       -- An activity due at once (granted now, or due at its insert) has its step:scheduled read off its row by the
       -- run_events view; one due later, or inserted ended, stores it.
       WHERE kind IN ('timer', 'signal') OR (kind = 'child' AND status = 'running')
          OR (kind = 'activity'
              AND CASE WHEN status = 'running' THEN started_at ELSE next_run_at END
                  IS DISTINCT FROM (SELECT t FROM clock))
      RETURNING 1),
    -- The child runs this turn starts, pending with their first turn due now, their parent recorded; a child whose
    -- key was taken fails its step instead.
    -- The parent's own earlier children at the positions it starts again (see child_keys), locked after the
    -- parent's rows (an ancestor before its descendants): one that failed or was cancelled lets go of its key for
    -- the new child run; one still pending or running is now the new step's child. Before the inserts below.
    own_children AS (
      UPDATE "palisade"."runs" c
         SET idempotency_key = CASE WHEN c.status IN ('failed', 'cancelled') THEN NULL ELSE c.idempotency_key END,
             parent_step_id = CASE WHEN c.status IN ('failed', 'cancelled') THEN c.parent_step_id ELSE i.id END
        FROM child_keys k JOIN inserted i ON i.seq = k.seq AND i.kind = 'child' AND i.status = 'running'
       WHERE c.id = k.run_id AND k.own AND c.status <> 'completed'
      RETURNING c.id, c.status),
    children AS (
      INSERT INTO "palisade"."runs" (id, kind, name, status, input, idempotency_key, queue, priority, turn_next_run_at,
                             created_at, parent_run_id, parent_step_id)
      SELECT (i.input->>'runId')::uuid, 'workflow', i.name, 'pending', i.input->'input', i.input->>'key', i.queue,
             i.priority, (SELECT t FROM clock), (SELECT t FROM clock), $25::uuid, i.id
        FROM inserted i WHERE i.kind = 'child' AND i.status = 'running'
         AND (SELECT count(*) FROM own_children) >= 0
         AND NOT EXISTS (SELECT 1 FROM own_children o
                          WHERE o.id = (i.input->>'runId')::uuid AND o.status NOT IN ('failed', 'cancelled'))
      RETURNING id, name, queue),
    child_refused_events AS (
      INSERT INTO "palisade"."events" (run_id, step_id, type, data, terminal, at)
      SELECT $26::uuid, id, 'step:' || status,
             CASE WHEN status = 'failed' THEN jsonb_build_object('error', error)
                  ELSE jsonb_build_object('childRunId', input->>'runId') END,
             true, (SELECT t FROM clock)
        FROM inserted WHERE kind = 'child' AND status IN ('failed', 'completed')
      RETURNING 1),
    cancelled_events AS (
      INSERT INTO "palisade"."events" (run_id, step_id, type, data, terminal, at)
      SELECT $27::uuid, id, 'step:cancelled',
             CASE WHEN ended_with_run THEN jsonb_build_object('reason', 'the run ended', 'whileRunning', false)
                  ELSE jsonb_build_object('reason', 'the run was cancelled before this step could start') END,
             true, (SELECT t FROM clock)
        FROM inserted WHERE status = 'cancelled'
      RETURNING 1),
    marked AS (
      UPDATE "palisade"."steps" s
         SET delivered_seq = dl.delivered_seq,
             status = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = $28::uuid THEN 'completed'
                           ELSE s.status END,
             finished_at = CASE WHEN s.id = $29::uuid OR dl.fires_timer OR dl.signal_id IS NOT NULL
                                THEN ('epoch'::timestamptz + (($30::bigint) * interval '1 millisecond'))
                                ELSE s.finished_at END,
             next_run_at = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = $31::uuid THEN NULL
                                ELSE s.next_run_at END,
             -- A signal wait's outcome: the signal it took, or its timeout; a fused step's, its completion's.
             output = CASE WHEN dl.fires_timer AND s.kind = 'signal' THEN '{"timedOut": true}'::jsonb
                           ELSE s.output END
        FROM dl
       WHERE s.id = dl.id AND s.run_id = $32::uuid AND EXISTS (SELECT 1 FROM go)
      RETURNING s.id, s.seq, s.kind, dl.fires_timer, dl.signal_id, s.fencing_token),



    -- A run that ends leaves no signal pending: each one no wait took is undelivered, the run's end its reason. A
    -- signal is stored under the run's row lock while the run goes on (sendSignal), so every signal is stored
    -- before this end, and marked here, or refused by its sender as RUN_ENDED.
    unseen AS (
      UPDATE "palisade"."signals" g
         SET consumed_at = (SELECT t FROM clock),
             undelivered = jsonb_build_object('reason', 'run-ended', 'status', $33::text)
       WHERE g.run_id = $34::uuid AND g.consumed_at IS NULL AND EXISTS (SELECT 1 FROM go)
         AND g.id <> ALL($35::bigint[])
      RETURNING g.id, g.name),
    unseen_events AS (
      INSERT INTO "palisade"."events" (run_id, type, data, terminal, at)
      SELECT $36::uuid, 'signal:undelivered',
             jsonb_build_object('name', name, 'signalId', id::text, 'reason', 'run-ended', 'status', $37::text),
             false, (SELECT t FROM clock)
        FROM unseen
      RETURNING 1),
    -- The one write of the run row: its end, or its next turn (now if anything woke it since the claim).
    run_row AS (
      UPDATE "palisade"."runs" r
         SET turn_lease_expires_at = NULL,
             status = coalesce($38::text, r.status),
             output = CASE WHEN $39 THEN $40::jsonb ELSE r.output END,
             error = CASE WHEN $41 THEN $42::jsonb ELSE r.error END,
             finished_at = CASE WHEN $43 THEN (SELECT t FROM clock) ELSE r.finished_at END,
             progress = CASE WHEN $44 THEN $45::jsonb ELSE r.progress END,
             turn_next_run_at = NULL
       WHERE r.id = (SELECT id FROM go)
      RETURNING r.id, r.queue, r.turn_next_run_at <= (SELECT t FROM clock) AS due_now, r.status, r.output, r.error,
                r.cancel_reason, r.turn_token, r.turn_nonce, r.turn_epoch, r.turn_attempt,
                r.parent_step_id, r.concurrency_key),
    turn_attempt AS (
      UPDATE "palisade"."attempt_records" SET outcome = 'completed', ended_at = (SELECT t FROM clock)
       WHERE fencing_token = $46::bigint AND outcome IS NULL AND EXISTS (SELECT 1 FROM go)
      RETURNING 1),
    -- Every live step ends with the run, running ones included (invariant 12: the holder's next write is
    -- refused as "cancelled" and its signal fires), each from its newest version (locked above).
    leftover AS (
      UPDATE "palisade"."steps" s SET status = 'cancelled', finished_at = (SELECT t FROM clock), next_run_at = NULL,
                              cancel_requested_at = coalesce(s.cancel_requested_at, (SELECT t FROM clock))
        FROM locked l
       WHERE $47 AND s.id = l.id AND l.status IN ('scheduled', 'running') AND EXISTS (SELECT 1 FROM go)
         AND NOT EXISTS (SELECT 1 FROM dl WHERE dl.id = l.id)
      RETURNING s.run_id, s.id, s.attempt, s.epoch, s.fencing_token, s.nonce, s.worker_id,
             s.claimed_at, s.reclaimed_from_token, s.granted_until, s.ended_nonce, l.status AS prev_status, s.kind,
                s.input->>'runId' AS child_run_id, s.input->>'cancellation' AS cancellation),
    leftover_attempts AS (
      INSERT INTO "palisade"."attempt_records" (run_id, step_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at,
                                 reclaimed_from_token, granted_until, outcome, ended_at, error)
      SELECT g.run_id, g.id, 'activity', g.attempt, g.epoch, g.fencing_token, g.nonce,
             g.worker_id, g.claimed_at, g.reclaimed_from_token, g.granted_until, 'cancelled', (SELECT t FROM clock),
             NULL::jsonb
        FROM leftover g
       WHERE g.claimed_at IS NOT NULL AND g.ended_nonce IS DISTINCT FROM g.nonce AND (g.prev_status = 'running')
      ON CONFLICT (fencing_token) DO NOTHING
      RETURNING 1),
    leftover_events AS (
      INSERT INTO "palisade"."events" (run_id, step_id, type, attempt, epoch, fencing_token, data, terminal, at)
      SELECT $48::uuid, id, 'step:cancelled', attempt, epoch, fencing_token,
             jsonb_build_object('reason', 'the run ended', 'whileRunning', prev_status = 'running'), true,
             (SELECT t FROM clock)
        FROM leftover
      RETURNING 1),

    -- The end of a child run completes its parent's step (still running: a cancel of the parent ended it already)
    -- with its output, or fails it with a ChildWorkflowFailure carrying its failure, and wakes the parent.
    parent_step AS (
      UPDATE "palisade"."steps" s
         SET status = CASE WHEN $49::text = 'completed' THEN 'completed' ELSE 'failed' END,
             output = CASE WHEN $50::text = 'completed' THEN $51::jsonb END,
             error = CASE WHEN $52::text = 'completed' THEN NULL
                          ELSE jsonb_build_object(
                                 'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', $53::text,
                                 'message', 'child workflow run ' || $54::text || ' ' || $55::text,
                                 'cause', $56::jsonb) END,
             finished_at = (SELECT t FROM clock)
        FROM run_row r
       WHERE s.id = r.parent_step_id AND s.kind = 'child' AND s.status = 'running' AND s.retired_at IS NULL
      RETURNING s.id, s.run_id, s.seq, s.status, s.error),
    parent_step_event AS (
      INSERT INTO "palisade"."events" (run_id, step_id, type, data, terminal, at)
      SELECT run_id, id, 'step:' || status,
             jsonb_build_object('childRunId', $57::text) || CASE WHEN error IS NOT NULL
                                                                    THEN jsonb_build_object('error', error)
                                                                    ELSE '{}'::jsonb END,
             true, (SELECT t FROM clock)
        FROM parent_step
      RETURNING 1),
    -- Children still running that the end cancels (cancellation 'cascade'): marked here, durably, and woken — a
    -- parent's run row and steps are locked before its children's. cascadeToChildren then ends their live steps
    -- after the commit, as a cancel does; a child whose process died before that still sees the cancel at its next
    -- step.
    cascaded AS (
      UPDATE "palisade"."runs" c
         SET cancel_requested_at = coalesce(c.cancel_requested_at, (SELECT t FROM clock)),
             cancel_reason = coalesce(c.cancel_reason, 'its parent run ended with it running'),
             turn_next_run_at = (SELECT t FROM clock), wake_count = c.wake_count + 1
        FROM leftover l
       WHERE l.kind = 'child' AND l.cancellation = 'cascade' AND c.id = (l.child_run_id)::uuid
         AND c.status IN ('pending', 'running')
      RETURNING c.id, c.queue),
    cascaded_events AS (
      INSERT INTO "palisade"."events" (run_id, type, data, at)
      SELECT id, 'run:cancel-requested', jsonb_build_object('reason', 'its parent run ended with it running'),
             (SELECT t FROM clock)
        FROM cascaded
      RETURNING 1),
    parent_woken AS (
      UPDATE "palisade"."runs" p
         SET turn_next_run_at = least(coalesce(p.turn_next_run_at, (SELECT t FROM clock)), (SELECT t FROM clock)),
             wake_count = p.wake_count + 1
       WHERE p.id = (SELECT run_id FROM parent_step) AND p.status IN ('pending', 'running')
      RETURNING p.queue),
    
    -- Wake-ups, sent at COMMIT in one NOTIFY: workers of the new activities' queues, the run's queue when its
    -- next turn is due now, the run's waiters when it ended and a handle.result() waits on it, and, when it goes
    -- on, its watchers (a handle.watch() waits on it now: one NOTIFY item per turn, for watched runs only).
    notified AS (
    SELECT pg_notify($58,
             CASE WHEN length(p.all_items) <= $59 THEN p.all_items
                  ELSE concat_ws(E'\n', 'run:*', p.other_items) END)
      FROM (SELECT string_agg(item, E'\n') AS all_items,
                   string_agg(item, E'\n') FILTER (WHERE item NOT LIKE 'run:%') AS other_items
              FROM (SELECT DISTINCT item FROM (SELECT 'step:' || queue FROM inserted WHERE kind = 'activity' AND status = 'scheduled'
          UNION ALL SELECT 'turn:' || queue FROM run_row WHERE due_now
          UNION ALL SELECT 'run:' || id::text FROM (SELECT * FROM run_row WHERE $60) x WHERE "palisade"."run_watched"(id, false)
          -- A run under a concurrency key that ends gives its place to a pending run of its key (flow-control.ts).
          UNION ALL SELECT 'turn:' || queue FROM run_row WHERE $61 AND concurrency_key IS NOT NULL
          UNION ALL SELECT 'watch:' || id::text FROM run_row WHERE NOT $62 AND "palisade"."run_watched"(id, true) UNION ALL SELECT 'turn:' || queue FROM children UNION ALL SELECT 'turn:' || queue FROM parent_woken UNION ALL SELECT 'turn:' || queue FROM cascaded) x(item) WHERE item IS NOT NULL) d) p
     WHERE p.all_items IS NOT NULL)
    SELECT EXISTS (SELECT 1 FROM fence) AS fenced,
           (SELECT conflict FROM gate) AS conflict,
           
           (SELECT count(*) FROM notified) AS notified,
           (SELECT jsonb_agg(id::text) FROM cascaded) AS cascade_children,
           (SELECT jsonb_build_object('status', status, 'output', output, 'error', error, 'cancel_reason', cancel_reason)
              FROM run_row WHERE $63) AS ended,
           (SELECT jsonb_agg(jsonb_build_object(
              'id', e.id::text, 'run_id', $64::text, 'seq', e.seq, 'name', e.name, 'queue', e.queue,
              'input', e.input, 'attempt', e.attempt, 'epoch', e.epoch, 'token', e.fencing_token::text,
              'nonce', e.nonce::text, 'lease_ms', p.lease_ms, 'start_to_close_timeout_ms', p.start_to_close_timeout_ms,
              'retry_policy', p.retry_policy, 'heartbeat_details', NULL,
              'remaining_ms', (extract(epoch FROM (e.lease_expires_at - "palisade"."now"())) * 1000)::float8,
              'prev_token', NULL, 'fencing_scope', e.fencing_scope, 'next_due_ms', NULL) ORDER BY e.seq)
              FROM inserted e JOIN planned p ON p.seq = e.seq
             WHERE e.kind = 'activity' AND e.status = 'running') AS eager_steps

-- parameters
-- $1 = "00000000-0000-4000-8000-000000000001"
-- $2 = "00000000-0000-4000-8000-000000000001"
-- $3 = "41"
-- $4 = "00000000-0000-4000-8000-0000000000ee"
-- $5 = "[{\"id\":\"00000000-0000-4000-8000-00000000000b\",\"seq\":1,\"delivered_seq\":1,\"fires_timer\":false,\"signal_id\":null}]"
-- $6 = "00000000-0000-4000-8000-000000000001"
-- $7 = "{00000000-0000-4000-8000-00000000000b}"
-- $8 = true
-- $9 = false
-- $10 = "00000000-0000-4000-8000-000000000001"
-- $11 = "[{\"seq\":6,\"kind\":\"child\",\"name\":\"ship\",\"after_delivered_seq\":1,\"status\":\"running\",\"delivered_seq\":null,\"error\":null,\"input\":{\"runId\":\"00000000-0000-4000-8000-0000000000c1\",\"input\":{\"orderId\":\"o-1\"},\"key\":\"ship-o-1\",\"cancellation\":\"cascade\"},\"output\":null,\"queue\":\"default\",\"priority\":0,\"retry_policy\":{},\"lease_ms\":0,\"start_to_close_timeout_ms\":0,\"delay_ms\":null,\"due_at_ms\":null,\"signal_id\":null,\"concurrency_key\":null,\"concurrency_limit\":null,\"rate_key\":null,\"rate_limit\":null,\"rate_period_ms\":null}]"
-- $12 = "00000000-0000-4000-8000-000000000001"
-- $13 = true
-- $14 = "[]"
-- $15 = "[]"
-- $16 = 0
-- $17 = "00000000-0000-4000-8000-000000000001"
-- $18 = "00000000-0000-4000-8000-000000000001"
-- $19 = true
-- $20 = "00000000-0000-4000-8000-000000000001"
-- $21 = "run:00000000-0000-4000-8000-000000000001/seq:"
-- $22 = 1780000000000
-- $23 = ""
-- $24 = "00000000-0000-4000-8000-000000000001"
-- $25 = "00000000-0000-4000-8000-000000000001"
-- $26 = "00000000-0000-4000-8000-000000000001"
-- $27 = "00000000-0000-4000-8000-000000000001"
-- $28 = null
-- $29 = null
-- $30 = 1780000000000
-- $31 = null
-- $32 = "00000000-0000-4000-8000-000000000001"
-- $33 = "completed"
-- $34 = "00000000-0000-4000-8000-000000000001"
-- $35 = "{}"
-- $36 = "00000000-0000-4000-8000-000000000001"
-- $37 = "completed"
-- $38 = "completed"
-- $39 = true
-- $40 = "{\"orderId\":\"o-1\"}"
-- $41 = true
-- $42 = null
-- $43 = true
-- $44 = false
-- $45 = null
-- $46 = "41"
-- $47 = true
-- $48 = "00000000-0000-4000-8000-000000000001"
-- $49 = "completed"
-- $50 = "completed"
-- $51 = "{\"orderId\":\"o-1\"}"
-- $52 = "completed"
-- $53 = "00000000-0000-4000-8000-000000000001"
-- $54 = "00000000-0000-4000-8000-000000000001"
-- $55 = "completed"
-- $56 = null
-- $57 = "00000000-0000-4000-8000-000000000001"
-- $58 = "palisade_palisade"
-- $59 = 7900
-- $60 = true
-- $61 = true
-- $62 = true
-- $63 = true
-- $64 = "00000000-0000-4000-8000-000000000001"
