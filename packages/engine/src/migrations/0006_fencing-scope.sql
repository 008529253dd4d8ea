-- The fencing scope names the unit of work (a run and a position), not the step row: rows written before this
-- migration keep the scope their attempts were handed (`step:<id>`), so fences already recorded under it hold.
ALTER TABLE "palisade"."steps" ADD COLUMN "fencing_scope" text;--> statement-breakpoint
UPDATE "palisade"."steps" SET "fencing_scope" = 'step:' || "id"::text;--> statement-breakpoint
ALTER TABLE "palisade"."steps" ALTER COLUMN "fencing_scope" SET NOT NULL;
