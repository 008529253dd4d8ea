-- Flow control (issue 14): per-key concurrency of steps and workflow runs, and per-key rate limits of activity
-- starts, enforced by the claim statements. flow_keys holds one row per key, locked and versioned by the claims that
-- admit work under it. The steps index has status in its predicate, as the claim indexes do; the runs index does
-- not (a run's status changes on its hot path and must stay a HOT update).
CREATE TABLE "palisade"."flow_keys" (
	"key" text PRIMARY KEY NOT NULL,
	"version" bigint DEFAULT 0 NOT NULL,
	"recent" timestamp with time zone[] DEFAULT '{}' NOT NULL
);
--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD COLUMN "concurrency_key" text;--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD COLUMN "concurrency_limit" integer;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "concurrency_key" text;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "concurrency_limit" integer;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "rate_key" text;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "rate_limit" integer;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "rate_period_ms" integer;--> statement-breakpoint
CREATE INDEX "runs_concurrency_key_idx" ON "palisade"."runs" USING btree ("name","concurrency_key") WHERE "palisade"."runs"."concurrency_key" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "steps_concurrency_running_idx" ON "palisade"."steps" USING btree ("name","concurrency_key") WHERE "palisade"."steps"."concurrency_key" IS NOT NULL AND "palisade"."steps"."status" = 'running';