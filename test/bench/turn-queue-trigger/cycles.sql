-- The turn cycles of run.sh: cycle_trigger(off) lets the triggers of migration 0025 keep turn_queue; cycle_explicit(off)
-- makes the same queue writes in the statements (run with the triggers disabled). Each returns µs per cycle over the
-- 300 runs from offset off.
CREATE OR REPLACE FUNCTION turnq_cpu.cycle_trigger(off int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE r uuid; t0 timestamptz := clock_timestamp(); n int := 0;
BEGIN
  FOR r IN SELECT id FROM turnq_cpu.runs ORDER BY id LIMIT 300 OFFSET off LOOP
    UPDATE turnq_cpu.runs SET turn_next_run_at = clock_timestamp(), wake_count = wake_count + 1 WHERE id = r;
    UPDATE turnq_cpu.runs SET turn_lease_expires_at = clock_timestamp() + interval '30s' WHERE id = r;
    UPDATE turnq_cpu.runs SET turn_next_run_at = NULL, turn_lease_expires_at = NULL WHERE id = r;
    n := n + 1;
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
END $$;
CREATE OR REPLACE FUNCTION turnq_cpu.cycle_explicit(off int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE r uuid; t0 timestamptz := clock_timestamp(); n int := 0;
BEGIN
  FOR r IN SELECT id FROM turnq_cpu.runs ORDER BY id LIMIT 300 OFFSET off LOOP
    WITH u AS (UPDATE turnq_cpu.runs SET turn_next_run_at = clock_timestamp(), wake_count = wake_count + 1 WHERE id = r
               RETURNING id, queue, priority, name, turn_next_run_at)
    INSERT INTO turnq_cpu.turn_queue (queue, priority, due_at, run_id, name) SELECT queue, priority, turn_next_run_at, id, name FROM u;
    WITH o AS (SELECT id, queue, priority, turn_next_run_at FROM turnq_cpu.runs WHERE id = r FOR NO KEY UPDATE),
         u AS (UPDATE turnq_cpu.runs SET turn_lease_expires_at = clock_timestamp() + interval '30s' WHERE id = r
               RETURNING id, turn_lease_expires_at)
    UPDATE turnq_cpu.turn_queue q SET due_at = u.turn_lease_expires_at FROM o, u
     WHERE q.queue = o.queue AND q.priority = o.priority AND q.due_at = o.turn_next_run_at AND q.run_id = o.id;
    WITH o AS (SELECT id, queue, priority, greatest(turn_next_run_at, turn_lease_expires_at) AS due FROM turnq_cpu.runs WHERE id = r FOR NO KEY UPDATE),
         u AS (UPDATE turnq_cpu.runs SET turn_next_run_at = NULL, turn_lease_expires_at = NULL WHERE id = r RETURNING id)
    DELETE FROM turnq_cpu.turn_queue q USING o, u
     WHERE q.queue = o.queue AND q.priority = o.priority AND q.due_at = o.due AND q.run_id = o.id;
    n := n + 1;
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
END $$;
