-- The status and kind columns take only the values of the state machines in turn/state-machine.ts (issue 27):
-- a statement that writes any other value now fails instead of leaving a row no reader understands. Every value
-- any earlier version wrote is in these lists, so the constraints validate against existing rows. A CHECK is
-- evaluated on the row being written only; it adds no index, so the hot path's updates stay HOT.
ALTER TABLE "palisade"."attempts" ADD CONSTRAINT "attempts_outcome_check" CHECK ("palisade"."attempts"."outcome" IN ('completed', 'failed', 'lease_expired', 'rejected_stale', 'cancelled', 'timed_out', 'released'));--> statement-breakpoint
ALTER TABLE "palisade"."attempts" ADD CONSTRAINT "attempts_kind_check" CHECK ("palisade"."attempts"."kind" IN ('activity', 'turn'));--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD CONSTRAINT "runs_status_check" CHECK ("palisade"."runs"."status" IN ('pending', 'running', 'completed', 'failed', 'cancelled'));--> statement-breakpoint
ALTER TABLE "palisade"."runs" ADD CONSTRAINT "runs_kind_check" CHECK ("palisade"."runs"."kind" IN ('workflow', 'activity'));--> statement-breakpoint
ALTER TABLE "palisade"."schedules" ADD CONSTRAINT "schedules_target_kind_check" CHECK ("palisade"."schedules"."target_kind" IN ('workflow', 'activity'));--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD CONSTRAINT "steps_status_check" CHECK ("palisade"."steps"."status" IN ('scheduled', 'running', 'completed', 'failed', 'cancelled'));--> statement-breakpoint
ALTER TABLE "palisade"."steps" ADD CONSTRAINT "steps_kind_check" CHECK ("palisade"."steps"."kind" IN ('activity', 'timer', 'signal', 'child', 'value'));