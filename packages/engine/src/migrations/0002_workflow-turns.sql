ALTER TABLE "palisade"."runs" ADD COLUMN "wake_count" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD COLUMN "delivered_seq" integer;