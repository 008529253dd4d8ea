-- Watchers as rows of their own (issue 26), replacing the counters runs.result_waiters and runs.watchers: those
-- only grew (a run watched once NOTIFYed on every later turn), and every handle.result()/watch() wrote the hot run
-- row to register. A waiter now inserts its row here and deletes it when it returns; one that died lapses at
-- expires_at and the retention sweep deletes it.
CREATE TABLE "palisade"."run_watchers" (
	"id" uuid PRIMARY KEY NOT NULL,
	"run_id" uuid NOT NULL,
	"turns" boolean NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE INDEX "run_watchers_run_id_idx" ON "palisade"."run_watchers" USING btree ("run_id","turns");--> statement-breakpoint
CREATE INDEX "run_watchers_expires_at_idx" ON "palisade"."run_watchers" USING btree ("expires_at");--> statement-breakpoint
ALTER TABLE "palisade"."runs" DROP COLUMN "result_waiters";--> statement-breakpoint
ALTER TABLE "palisade"."runs" DROP COLUMN "watchers";
--> statement-breakpoint
-- Whether run `p_run_id` has a live watcher (`p_turns`: one that watches every turn, not only the end). Called by
-- the statements that end a run or commit a turn, after they updated the run row, to decide on their NOTIFY item.
-- plpgsql and VOLATILE so that, under READ COMMITTED, its query takes a snapshot of its own when it is called
-- instead of the calling statement's, which was taken before that statement waited for the run row: a waiter that
-- registered meanwhile is seen. One that commits its row after this call reads the run next and finds it being
-- written (its xmax in progress): it reads again once that write ended (see readRunForWaiter).
CREATE FUNCTION "palisade"."run_watched"(p_run_id uuid, p_turns boolean) RETURNS boolean
  LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM "palisade"."run_watchers" w WHERE w.run_id = p_run_id AND (w.turns OR NOT p_turns));
END
$$;
