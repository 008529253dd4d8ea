-- Flow-control keys without history (issue 26): a keyed workflow's running count read every run of its key,
-- finished ones included, and flow_keys rows were never deleted. runs.live_concurrency_key is the key while the run
-- is live (generated: no statement keeps it; null for unkeyed runs, whose status changes stay HOT), indexed in place
-- of runs_concurrency_key_idx. steps_flow_keyed_live_idx lets the retention sweep find the keys live work holds
-- (unkeyed steps have no entry). Adding the generated column rewrites the runs table once.
DROP INDEX "palisade"."runs_concurrency_key_idx";--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD COLUMN "live_concurrency_key" text GENERATED ALWAYS AS (CASE WHEN status IN ('pending', 'running') THEN concurrency_key END) STORED;--> statement-breakpoint
CREATE INDEX "runs_live_concurrency_key_idx" ON "palisade"."runs" USING btree ("name","live_concurrency_key") WHERE "palisade"."runs"."live_concurrency_key" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "steps_flow_keyed_live_idx" ON "palisade"."steps" USING btree ("name") WHERE ("palisade"."steps"."concurrency_key" IS NOT NULL OR "palisade"."steps"."rate_key" IS NOT NULL) AND "palisade"."steps"."status" IN ('scheduled', 'running');