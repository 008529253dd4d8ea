-- handle.result() registers on the run it waits for; a statement that ends a run NOTIFYs its waiters only when
-- one has registered (issue 12: no NOTIFY where nobody can be waiting; every NOTIFY serializes commits).
ALTER TABLE "palisade"."runs" ADD COLUMN "result_waiters" integer DEFAULT 0 NOT NULL;