-- A `handle.result()` registration writes its run row (`result_waiters`), and a completion or turn claim that
-- compared the row version its snapshot saw with the one it locked (`xmin`) took that write for news in the
-- run's history: the worker's kept workflow instance was replayed in full for nothing (seen: eager-turn tests
-- under load). The registration now records its own transaction id and the history version it replaced, so
-- the comparison reads through it (queries/fenced-outcome.ts, `historyXmin`).
ALTER TABLE "palisade"."runs" ADD COLUMN "registered_xmin" text;--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD COLUMN "history_xmin" text;