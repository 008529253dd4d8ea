ALTER TABLE "palisade"."steps" DROP CONSTRAINT "steps_run_id_seq_unique";--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "after_delivered_seq" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "retired_at" timestamp with time zone;--> statement-breakpoint
CREATE UNIQUE INDEX "steps_run_id_seq_live_unique" ON "palisade"."steps" USING btree ("run_id","seq") WHERE "palisade"."steps"."retired_at" IS NULL;