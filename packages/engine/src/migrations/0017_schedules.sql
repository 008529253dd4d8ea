-- Durable schedules: a cron expression (read by croner in a time zone) or an interval, and the run each tick
-- starts. The statement that fires ticks compare-and-sets a schedule row (`version`, `next_tick_at`) and inserts
-- its runs with ON CONFLICT DO NOTHING on (schedule_id, schedule_tick_at): exactly one run per tick, whoever
-- evaluates, with due times judged by <schema>.now() only. The runs index is partial: runs without a schedule
-- are not in it, and no column it reads ever changes, so updates of runs stay HOT.
CREATE TABLE "palisade"."schedules" (
	"id" text PRIMARY KEY NOT NULL,
	"cron" text,
	"every_ms" bigint,
	"timezone" text NOT NULL,
	"target_kind" text NOT NULL,
	"target_name" text NOT NULL,
	"input" jsonb,
	"run_options" jsonb NOT NULL,
	"overlap" text NOT NULL,
	"catchup" jsonb NOT NULL,
	"paused" boolean DEFAULT false NOT NULL,
	"next_tick_at" timestamp with time zone NOT NULL,
	"version" bigint DEFAULT 1 NOT NULL,
	"last_run_id" uuid,
	"last_tick_at" timestamp with time zone,
	"buffered_tick_at" timestamp with time zone,
	"skipped_ticks" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD COLUMN "schedule_id" text;--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD COLUMN "schedule_tick_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "schedules_due_idx" ON "palisade"."schedules" USING btree ("next_tick_at") WHERE NOT "palisade"."schedules"."paused";--> statement-breakpoint
CREATE INDEX "schedules_buffered_idx" ON "palisade"."schedules" USING btree ("buffered_tick_at") WHERE "palisade"."schedules"."buffered_tick_at" IS NOT NULL AND NOT "palisade"."schedules"."paused";--> statement-breakpoint
CREATE UNIQUE INDEX "runs_schedule_tick_unique" ON "palisade"."runs" USING btree ("schedule_id","schedule_tick_at") WHERE "palisade"."runs"."schedule_id" IS NOT NULL;