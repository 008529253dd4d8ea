-- Signals no wait will take (issue 26): a payload that fails the schema of the wait it reached is refused at that
-- wait (the run keeps waiting), and a signal still pending when its run ends is marked by the end; `undelivered`
-- says which, `consumed_at` when. Pending is now `consumed_at IS NULL`.
ALTER TABLE "palisade"."signals" ADD COLUMN "undelivered" jsonb;
