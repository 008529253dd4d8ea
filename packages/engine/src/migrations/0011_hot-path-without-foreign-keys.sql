-- The foreign keys that every claim and every enqueue checked are dropped (issue 12, fewer writes per job). Each
-- check ran a trigger per inserted row and took a key-share lock on the referenced row: a WAL record of its own
-- (on a claim, the step row the same statement had just updated). Measured on 10,000 no-op jobs: one row lock and
-- two triggers fewer per job. Nothing relied on them: an attempt is inserted only by the statement that has just
-- locked and updated the step or run it names, a step only by the statement that inserts its run or holds its
-- run's row locked, and pruning deletes a run's events, attempts and steps itself (prune-runs.ts). Deleting a run
-- by hand no longer deletes its steps and attempts: use `palisade runs prune`. The events' key to its run stays
-- (off the hot path).
ALTER TABLE "palisade"."attempts" DROP CONSTRAINT "attempts_run_id_runs_id_fk";
--> statement-breakpoint
ALTER TABLE "palisade"."attempts" DROP CONSTRAINT "attempts_step_id_steps_id_fk";
--> statement-breakpoint
ALTER TABLE "palisade"."steps" DROP CONSTRAINT "steps_run_id_runs_id_fk";
