-- Signals (issue 13): messages sent to a workflow run from outside, kept in arrival order until a turn of the run
-- hands one to a wait (`ctx.waitForSignal`) and records the step that took it, in its fenced commit.
CREATE TABLE "palisade"."signals" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"run_id" uuid NOT NULL,
	"name" text NOT NULL,
	"payload" jsonb,
	"request_id" uuid NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"step_id" uuid,
	"consumed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE INDEX "signals_run_id_idx" ON "palisade"."signals" USING btree ("run_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "signals_request_id_unique" ON "palisade"."signals" USING btree ("request_id");