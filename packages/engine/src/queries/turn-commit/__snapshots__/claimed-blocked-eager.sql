-- claimed-blocked-eager: a turn that schedules activities this worker serves: turn-loop passes its dispatch reservation

    WITH 
    lk AS MATERIALIZED (
      SELECT r.id, r.queue, r.status, r.turn_token, r.turn_nonce, r.turn_lease_expires_at, r.turn_epoch,
             r.turn_attempt, r.turn_worker_id, r.wake_count, r.turn_next_run_at,
             r.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM "palisade"."runs" r
       WHERE r.id = $1::uuid
         FOR NO KEY UPDATE OF r),
    -- The turn's lease is judged by the clock read once the run row is locked: read before a wait on a row
    -- another statement only locked (no recheck follows), it would pass a lease that ran out meanwhile.
    lock_clock AS MATERIALIZED (SELECT "palisade"."now"() AS t FROM (SELECT count(*) FROM lk) x),
    fence AS MATERIALIZED (
      SELECT lk.* FROM lk
       WHERE lk.turn_token = $2::bigint AND lk.turn_nonce = $3::uuid
         AND lk.turn_lease_expires_at > (SELECT t FROM lock_clock) AND lk.status IN ('pending', 'running')),
    -- The outcomes delivered, each by step id; a wait recorded by a turn of a kept instance (which does not know
    -- its id) by its position, as the live step there.
    dl AS MATERIALIZED (
      SELECT x.id AS id, x.delivered_seq, x.fires_timer, x.signal_id
        FROM jsonb_to_recordset($4::jsonb)
             AS x(id uuid, seq int, delivered_seq int, fires_timer boolean, signal_id bigint) LIMIT 1),
    -- Then the steps this commit changes, by id, each as its newest version (a claim that committed while the
    -- statement waited is seen as running; one that comes later skips the locked row).
    locked AS MATERIALIZED (
      SELECT s.id, s.status, s.fencing_token, s.nonce, s.lease_expires_at FROM "palisade"."steps" s
       WHERE s.run_id = $5::uuid AND EXISTS (SELECT 1 FROM fence)
         AND (s.id = ANY($6::uuid[])
              OR ($7 AND s.status IN ('scheduled', 'running') AND s.retired_at IS NULL))
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
             (f.cancel_requested AND $8)
             OR EXISTS (SELECT 1 FROM dl LEFT JOIN locked l ON l.id = dl.id
                         WHERE (dl.fires_timer OR dl.signal_id IS NOT NULL) AND l.status IS DISTINCT FROM 'scheduled')
              AS conflict
        FROM fence f),
    -- Every write of the commit waits for go, and go for every lock of locked (step_clock counts them): no write
    -- may lock a step before the steps locked here are all held, in id order (seen: deadlocks with heartbeats when
    -- the deliveries were marked before the run's other live steps were locked).
    go AS MATERIALIZED (
      SELECT id, queue FROM gate WHERE NOT conflict AND (SELECT t FROM step_clock) IS NOT NULL AND true),
    ns AS (
      SELECT * FROM jsonb_to_recordset($9::jsonb) AS x(
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
       WHERE p.run_id = $10::uuid AND p.retired_at IS NOT NULL AND p.seq IN (SELECT seq FROM ns)
       GROUP BY p.seq),
    -- Eager dispatch: the new activities this worker serves, as many as it has slots for, are granted to it
    -- here, as a claim grants (claimSteps): attempt 1, epoch + 1, a fresh token from the global sequence, a
    -- fresh nonce, a lease from the database clock capped by the attempt deadline, an attempts row. Not a
    -- position whose retired predecessor may still be held (it is not due before that lease ends), and nothing
    -- when the turn ends the run.
    eager_sel AS MATERIALIZED (
      SELECT ns.seq FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE NOT $11 AND ns.kind = 'activity' AND ns.status = 'scheduled'
         AND ns.name IN (SELECT jsonb_array_elements_text($12::jsonb))
         AND ns.queue IN (SELECT jsonb_array_elements_text($13::jsonb))
         AND (prev.held_until IS NULL OR prev.held_until <= (SELECT t FROM clock))
         -- Not a step under a concurrency key or a rate limit: only a claim admits those (flow-control.ts).
         AND ns.concurrency_key IS NULL AND ns.rate_key IS NULL
       ORDER BY ns.seq
       LIMIT $14),
    
    planned AS (
      SELECT ns.*, prev.fencing_scope AS prev_scope, prev.epoch AS prev_epoch, prev.held_until,
             ns.seq IN (SELECT seq FROM eager_sel) AS eager,
             NULL::text AS key_taken_by,
             NULL::uuid AS reused_run_id,
             NULL::jsonb AS reused_output,
             false AS reused_completed,
             -- A step the run's end cancels with the run's other live steps (a child it would start: not started).
             $15 AND (ns.status = 'scheduled' OR (ns.kind = 'child' AND ns.status = 'running')) AS ends_with_run,
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
      SELECT $16::uuid, p.seq, p.kind, p.name,
             coalesce(p.prev_scope, $17 || p.seq::text),
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
             CASE WHEN p.delivered_seq IS NOT NULL AND NOT p.ends_with_run AND p.key_taken_by IS NULL THEN ('epoch'::timestamptz + (($18::bigint) * interval '1 millisecond'))
                  WHEN p.status NOT IN ('scheduled', 'running') OR p.ends_with_run OR p.key_taken_by IS NOT NULL
                       OR p.reused_completed
                  THEN (SELECT t FROM clock) END,
             CASE WHEN p.ends_with_run THEN (SELECT t FROM clock) END,
             (SELECT t FROM clock),
             CASE WHEN p.eager THEN 1 ELSE 0 END,
             CASE WHEN p.eager THEN nextval('"palisade"."fencing_token_seq"') END,
             CASE WHEN p.eager THEN gen_random_uuid() END,
             CASE WHEN p.eager THEN $19 END,
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
      SELECT $20::uuid, id,
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
    marked AS (
      UPDATE "palisade"."steps" s
         SET delivered_seq = dl.delivered_seq,
             status = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = $21::uuid THEN 'completed'
                           ELSE s.status END,
             finished_at = CASE WHEN s.id = $22::uuid OR dl.fires_timer OR dl.signal_id IS NOT NULL
                                THEN ('epoch'::timestamptz + (($23::bigint) * interval '1 millisecond'))
                                ELSE s.finished_at END,
             next_run_at = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = $24::uuid THEN NULL
                                ELSE s.next_run_at END,
             -- A signal wait's outcome: the signal it took, or its timeout; a fused step's, its completion's.
             output = CASE WHEN dl.fires_timer AND s.kind = 'signal' THEN '{"timedOut": true}'::jsonb
                           ELSE s.output END
        FROM dl
       WHERE s.id = dl.id AND s.run_id = $25::uuid AND EXISTS (SELECT 1 FROM go)
      RETURNING s.id, s.seq, s.kind, dl.fires_timer, dl.signal_id, s.fencing_token),



    -- The run's earliest timer: those it had (less the ones this turn fires) and those this turn starts (a
    -- statement does not see its own inserts).
    waiting AS (
      SELECT s.kind, s.name, s.next_run_at AS due FROM "palisade"."steps" s
       WHERE s.run_id = $26::uuid AND s.kind IN ('timer', 'signal') AND s.status = 'scheduled'
         AND s.retired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM dl WHERE dl.id = s.id AND (dl.fires_timer OR dl.signal_id IS NOT NULL))
      UNION ALL
      SELECT kind, name, next_run_at FROM inserted WHERE kind IN ('timer', 'signal') AND status = 'scheduled'),
    -- Timers and signal waits' timeouts, those it had (less the ones this turn ends) and those it starts.
    next_timer AS (SELECT min(due) AS due FROM waiting),
    -- A pending signal that a wait of the run now waits for (one the turn did not see: it came after the turn's
    -- snapshot, or the turn made the wait without reading the run's signals, as a fused step's does).
    signal_due AS (
      SELECT EXISTS (
        SELECT 1 FROM "palisade"."signals" g
         WHERE g.run_id = $27::uuid AND g.consumed_at IS NULL
           AND EXISTS (SELECT 1 FROM waiting w WHERE w.kind = 'signal' AND w.name = g.name)) AS due),
    -- The one write of the run row: its end, or its next turn (now if anything woke it since the claim).
    run_row AS (
      UPDATE "palisade"."runs" r
         SET turn_lease_expires_at = NULL,
             status = coalesce($28::text, r.status),
             output = CASE WHEN $29 THEN $30::jsonb ELSE r.output END,
             error = CASE WHEN $31 THEN $32::jsonb ELSE r.error END,
             finished_at = CASE WHEN $33 THEN (SELECT t FROM clock) ELSE r.finished_at END,
             progress = CASE WHEN $34 THEN $35::jsonb ELSE r.progress END,
             turn_next_run_at = CASE WHEN r.wake_count <> $36 THEN (SELECT t FROM clock)
                                     WHEN (SELECT due FROM signal_due) THEN (SELECT t FROM clock)
                                     ELSE (SELECT due FROM next_timer) END
       WHERE r.id = (SELECT id FROM go)
      RETURNING r.id, r.queue, r.turn_next_run_at <= (SELECT t FROM clock) AS due_now, r.status, r.output, r.error,
                r.cancel_reason, r.turn_token, r.turn_nonce, r.turn_epoch, r.turn_attempt,
                r.parent_step_id, r.concurrency_key),
    turn_attempt AS (
      UPDATE "palisade"."attempt_records" SET outcome = 'completed', ended_at = (SELECT t FROM clock)
       WHERE fencing_token = $37::bigint AND outcome IS NULL AND EXISTS (SELECT 1 FROM go)
      RETURNING 1),

    
    -- Wake-ups, sent at COMMIT in one NOTIFY: workers of the new activities' queues, the run's queue when its
    -- next turn is due now, the run's waiters when it ended and a handle.result() waits on it, and, when it goes
    -- on, its watchers (a handle.watch() waits on it now: one NOTIFY item per turn, for watched runs only).
    notified AS (
    SELECT pg_notify($38,
             CASE WHEN length(p.all_items) <= $39 THEN p.all_items
                  ELSE concat_ws(E'\n', 'run:*', p.other_items) END)
      FROM (SELECT string_agg(item, E'\n') AS all_items,
                   string_agg(item, E'\n') FILTER (WHERE item NOT LIKE 'run:%') AS other_items
              FROM (SELECT DISTINCT item FROM (SELECT 'step:' || queue FROM inserted WHERE kind = 'activity' AND status = 'scheduled'
          UNION ALL SELECT 'turn:' || queue FROM run_row WHERE due_now
          UNION ALL SELECT 'run:' || id::text FROM (SELECT * FROM run_row WHERE $40) x WHERE "palisade"."run_watched"(id, false)
          -- A run under a concurrency key that ends gives its place to a pending run of its key (flow-control.ts).
          UNION ALL SELECT 'turn:' || queue FROM run_row WHERE $41 AND concurrency_key IS NOT NULL
          UNION ALL SELECT 'watch:' || id::text FROM run_row WHERE NOT $42 AND "palisade"."run_watched"(id, true)) x(item) WHERE item IS NOT NULL) d) p
     WHERE p.all_items IS NOT NULL)
    SELECT EXISTS (SELECT 1 FROM fence) AS fenced,
           (SELECT conflict FROM gate) AS conflict,
           
           (SELECT count(*) FROM notified) AS notified,
           (SELECT jsonb_build_object('status', status, 'output', output, 'error', error, 'cancel_reason', cancel_reason)
              FROM run_row WHERE $43) AS ended,
           (SELECT jsonb_agg(jsonb_build_object(
              'id', e.id::text, 'run_id', $44::text, 'seq', e.seq, 'name', e.name, 'queue', e.queue,
              'input', e.input, 'attempt', e.attempt, 'epoch', e.epoch, 'token', e.fencing_token::text,
              'nonce', e.nonce::text, 'lease_ms', p.lease_ms, 'start_to_close_timeout_ms', p.start_to_close_timeout_ms,
              'retry_policy', p.retry_policy, 'heartbeat_details', NULL,
              'remaining_ms', (extract(epoch FROM (e.lease_expires_at - "palisade"."now"())) * 1000)::float8,
              'prev_token', NULL, 'fencing_scope', e.fencing_scope, 'next_due_ms', NULL) ORDER BY e.seq)
              FROM inserted e JOIN planned p ON p.seq = e.seq
             WHERE e.kind = 'activity' AND e.status = 'running') AS eager_steps

-- parameters
-- $1 = "00000000-0000-4000-8000-000000000001"
-- $2 = "41"
-- $3 = "00000000-0000-4000-8000-0000000000ee"
-- $4 = "[{\"id\":\"00000000-0000-4000-8000-00000000000b\",\"seq\":1,\"delivered_seq\":1,\"fires_timer\":false,\"signal_id\":null}]"
-- $5 = "00000000-0000-4000-8000-000000000001"
-- $6 = "{00000000-0000-4000-8000-00000000000b}"
-- $7 = false
-- $8 = true
-- $9 = "[{\"seq\":2,\"kind\":\"activity\",\"name\":\"charge\",\"after_delivered_seq\":1,\"status\":\"scheduled\",\"delivered_seq\":null,\"error\":null,\"input\":{\"amountCents\":100},\"output\":null,\"queue\":\"default\",\"priority\":0,\"retry_policy\":{\"initialIntervalMs\":1000,\"backoffCoefficient\":2,\"maximumIntervalMs\":100000,\"maximumAttempts\":10,\"nonRetryableErrorTypes\":[],\"jitter\":0.2},\"lease_ms\":30000,\"start_to_close_timeout_ms\":300000,\"delay_ms\":0,\"due_at_ms\":null,\"signal_id\":null,\"concurrency_key\":null,\"concurrency_limit\":null,\"rate_key\":null,\"rate_limit\":null,\"rate_period_ms\":null}]"
-- $10 = "00000000-0000-4000-8000-000000000001"
-- $11 = false
-- $12 = "[\"charge\"]"
-- $13 = "[\"default\"]"
-- $14 = 4
-- $15 = false
-- $16 = "00000000-0000-4000-8000-000000000001"
-- $17 = "run:00000000-0000-4000-8000-000000000001/seq:"
-- $18 = 1780000000000
-- $19 = "worker-1"
-- $20 = "00000000-0000-4000-8000-000000000001"
-- $21 = null
-- $22 = null
-- $23 = 1780000000000
-- $24 = null
-- $25 = "00000000-0000-4000-8000-000000000001"
-- $26 = "00000000-0000-4000-8000-000000000001"
-- $27 = "00000000-0000-4000-8000-000000000001"
-- $28 = null
-- $29 = false
-- $30 = null
-- $31 = false
-- $32 = null
-- $33 = false
-- $34 = false
-- $35 = null
-- $36 = 3
-- $37 = "41"
-- $38 = "palisade_palisade"
-- $39 = 7900
-- $40 = false
-- $41 = false
-- $42 = false
-- $43 = false
-- $44 = "00000000-0000-4000-8000-000000000001"
