-- Time-ordered ids (issue 28 item 5; STORAGE.md §3.9, step 1): a UUIDv7 the database makes, for the rows it
-- keys itself (steps today). PostgreSQL 15 has no uuidv7(), so it is built here from core functions only (runs on
-- PGlite too): 48 bits of Unix milliseconds, version 7, 12 bits of sub-millisecond clock (RFC 9562 §6.2 method 3,
-- as PostgreSQL 18's uuidv7() does: the ids one session makes in different microseconds sort in the order made),
-- then the variant and 62 random bits of gen_random_uuid(). The real clock, not "palisade".now(): a key's order is
-- not a lease, and time travel must not move it. Rows written before keep their UUIDv4 ids.
CREATE FUNCTION "palisade"."uuid7"() RETURNS uuid
  LANGUAGE sql VOLATILE PARALLEL SAFE
  AS $$
    SELECT encode(
             set_byte(
               set_byte(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(t.us / 1000) FROM 3) FROM 1 FOR 6),
                        6, (112 + (t.us % 1000) * 4096 / 1000 / 256)::int),
               7, ((t.us % 1000) * 4096 / 1000 % 256)::int),
             'hex')::uuid
      FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us) t
  $$;
--> statement-breakpoint
ALTER TABLE "palisade"."runs" ALTER COLUMN "id" SET DEFAULT "palisade"."uuid7"();--> statement-breakpoint
ALTER TABLE "palisade"."steps" ALTER COLUMN "id" SET DEFAULT "palisade"."uuid7"();--> statement-breakpoint
-- Leaner run indexes (STORAGE.md §3.2): an unkeyed run no longer gets an idempotency-key entry, a run without a
-- parent no longer a parent entry. Every statement that reads either index names the column with `=`, which
-- implies IS NOT NULL, so each still uses it; the inserts use ON CONFLICT DO NOTHING without a target, which
-- checks every unique index, partial ones included. Rebuilt under this transaction's lock on runs: no insert
-- runs between the drop and the create, and the rows there are already unique.
ALTER TABLE "palisade"."runs" DROP CONSTRAINT "runs_kind_name_idempotency_key_unique";--> statement-breakpoint
CREATE UNIQUE INDEX "runs_kind_name_idempotency_key_unique" ON "palisade"."runs" USING btree ("kind","name","idempotency_key") WHERE "palisade"."runs"."idempotency_key" IS NOT NULL;--> statement-breakpoint
DROP INDEX "palisade"."runs_parent_run_id_idx";--> statement-breakpoint
CREATE INDEX "runs_parent_run_id_idx" ON "palisade"."runs" USING btree ("parent_run_id") WHERE "palisade"."runs"."parent_run_id" IS NOT NULL;
