-- Watchers apart from result waiters (issue 13): a turn commit of a run someone watches (`handle.watch()`) adds a
-- `watch:` item to its NOTIFY; a run that only a `handle.result()` waits on needs only its end's, and its turns —
-- eager and fused ones, which send none otherwise — must not pay a NOTIFY each. Unindexed: updates stay HOT.
ALTER TABLE "palisade"."runs" ADD COLUMN "watchers" integer DEFAULT 0 NOT NULL;