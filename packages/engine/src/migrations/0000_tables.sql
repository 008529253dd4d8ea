CREATE SCHEMA "palisade";
--> statement-breakpoint
CREATE SEQUENCE "palisade"."fencing_token_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
CREATE TABLE "palisade"."attempts" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"run_id" uuid NOT NULL,
	"step_id" uuid,
	"kind" text NOT NULL,
	"attempt" integer NOT NULL,
	"epoch" integer NOT NULL,
	"fencing_token" bigint NOT NULL,
	"nonce" uuid NOT NULL,
	"worker_id" text NOT NULL,
	"claimed_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	"outcome" text,
	"error" jsonb
);
--> statement-breakpoint
CREATE TABLE "palisade"."clock_offset" (
	"id" boolean PRIMARY KEY DEFAULT true NOT NULL,
	"offset_ms" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "palisade"."events" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"run_id" uuid NOT NULL,
	"step_id" uuid,
	"type" text NOT NULL,
	"attempt" integer,
	"epoch" integer,
	"fencing_token" bigint,
	"worker_id" text,
	"data" jsonb,
	"terminal" boolean DEFAULT false NOT NULL,
	"at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "palisade"."fences" (
	"scope" text PRIMARY KEY NOT NULL,
	"token" bigint NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "palisade"."runs" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"kind" text NOT NULL,
	"name" text NOT NULL,
	"status" text NOT NULL,
	"input" jsonb,
	"output" jsonb,
	"error" jsonb,
	"idempotency_key" text,
	"parent_run_id" uuid,
	"parent_step_id" uuid,
	"queue" text NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"cancel_requested_at" timestamp with time zone,
	"cancel_reason" text,
	"turn_next_run_at" timestamp with time zone,
	"turn_attempt" integer DEFAULT 0 NOT NULL,
	"turn_epoch" integer DEFAULT 0 NOT NULL,
	"turn_token" bigint,
	"turn_nonce" uuid,
	"turn_worker_id" text,
	"turn_lease_expires_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	CONSTRAINT "runs_idempotency_key_unique" UNIQUE("idempotency_key")
);
--> statement-breakpoint
CREATE TABLE "palisade"."steps" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"run_id" uuid NOT NULL,
	"seq" integer NOT NULL,
	"kind" text NOT NULL,
	"name" text NOT NULL,
	"status" text NOT NULL,
	"input" jsonb,
	"output" jsonb,
	"error" jsonb,
	"queue" text NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"attempt" integer DEFAULT 0 NOT NULL,
	"epoch" integer DEFAULT 0 NOT NULL,
	"fencing_token" bigint,
	"nonce" uuid,
	"claim_request_id" uuid,
	"worker_id" text,
	"retry_policy" jsonb NOT NULL,
	"lease_ms" integer NOT NULL,
	"start_to_close_timeout_ms" integer NOT NULL,
	"reclaim_delay_ms" integer DEFAULT 0 NOT NULL,
	"next_run_at" timestamp with time zone,
	"lease_expires_at" timestamp with time zone,
	"attempt_deadline_at" timestamp with time zone,
	"heartbeat_details" jsonb,
	"last_heartbeat_at" timestamp with time zone,
	"last_fenced_write_at" timestamp with time zone,
	"ended_nonce" uuid,
	"cancel_requested_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	CONSTRAINT "steps_run_id_seq_unique" UNIQUE("run_id","seq")
);
--> statement-breakpoint
ALTER TABLE "palisade"."attempts" ADD CONSTRAINT "attempts_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "palisade"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "palisade"."attempts" ADD CONSTRAINT "attempts_step_id_steps_id_fk" FOREIGN KEY ("step_id") REFERENCES "palisade"."steps"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "palisade"."events" ADD CONSTRAINT "events_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "palisade"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD CONSTRAINT "steps_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "palisade"."runs"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "attempts_step_id_idx" ON "palisade"."attempts" USING btree ("step_id","epoch");--> statement-breakpoint
CREATE INDEX "attempts_run_id_idx" ON "palisade"."attempts" USING btree ("run_id");--> statement-breakpoint
CREATE UNIQUE INDEX "attempts_fencing_token_unique" ON "palisade"."attempts" USING btree ("fencing_token");--> statement-breakpoint
CREATE INDEX "events_run_id_idx" ON "palisade"."events" USING btree ("run_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "events_one_terminal_per_step" ON "palisade"."events" USING btree ("step_id") WHERE "palisade"."events"."terminal" AND "palisade"."events"."step_id" IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "events_one_terminal_per_run" ON "palisade"."events" USING btree ("run_id") WHERE "palisade"."events"."terminal" AND "palisade"."events"."step_id" IS NULL;--> statement-breakpoint
CREATE INDEX "runs_status_created_at_idx" ON "palisade"."runs" USING btree ("status","created_at");--> statement-breakpoint
CREATE INDEX "runs_turn_due_idx" ON "palisade"."runs" USING btree ("queue","turn_next_run_at") WHERE "palisade"."runs"."turn_next_run_at" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "runs_parent_run_id_idx" ON "palisade"."runs" USING btree ("parent_run_id");--> statement-breakpoint
CREATE INDEX "steps_claimable_idx" ON "palisade"."steps" USING btree ("queue","next_run_at") WHERE "palisade"."steps"."status" IN ('scheduled', 'running');--> statement-breakpoint
CREATE INDEX "steps_running_lease_idx" ON "palisade"."steps" USING btree ("lease_expires_at") WHERE "palisade"."steps"."status" = 'running';--> statement-breakpoint
CREATE INDEX "steps_run_id_idx" ON "palisade"."steps" USING btree ("run_id");