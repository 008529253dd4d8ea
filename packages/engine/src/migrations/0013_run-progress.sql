-- A workflow run's progress (issue 13): the last `ctx.setProgress` value, written by the turn's commit with the run
-- row it writes anyway; not indexed, so the update stays HOT.
ALTER TABLE "palisade"."runs" ADD COLUMN "progress" jsonb;