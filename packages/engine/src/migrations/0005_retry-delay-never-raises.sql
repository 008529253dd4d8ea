-- The delay before a retry is computed inside the claim and failure statements, which serve every step of a queue:
-- a stored policy whose delay overflowed float8 (backoffCoefficient 1e308) or an integer ('30d') failed those
-- statements for every step, and the queue stopped. Policies are checked where they are defined now; this version
-- of the function also never raises, so a row stored before (or written by hand) fails no neighbour: inputs are
-- clamped as numeric before they become float8, the power is taken only when its result is below the maximum (in
-- log space, so it cannot overflow), and the result is capped at the integer range.
CREATE OR REPLACE FUNCTION "palisade"."retry_delay_ms"(policy jsonb, attempt integer) RETURNS integer
  LANGUAGE sql VOLATILE PARALLEL SAFE
  AS $$
    SELECT CASE
      WHEN p.initial <= 0 OR p.maximum <= 0 THEN 0
      ELSE least(2147483647, greatest(0, round(
        CASE WHEN ln(p.initial) + p.k * ln(p.coef) < ln(p.maximum) THEN p.initial * power(p.coef, p.k)
             ELSE p.maximum END
        * (1 - p.jitter * random()))))::integer
      END
      FROM (SELECT
              least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'initialIntervalMs') = 'number'
                                           THEN (policy->>'initialIntervalMs')::numeric END, 1000), 0), 2147483647)::float8 AS initial,
              least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'maximumIntervalMs') = 'number'
                                           THEN (policy->>'maximumIntervalMs')::numeric END, 2147483647), 0), 2147483647)::float8 AS maximum,
              least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'backoffCoefficient') = 'number'
                                           THEN (policy->>'backoffCoefficient')::numeric END, 2), 1), 1e300)::float8 AS coef,
              least(greatest(coalesce(CASE WHEN jsonb_typeof(policy->'jitter') = 'number'
                                           THEN (policy->>'jitter')::numeric END, 0), 0), 1)::float8 AS jitter,
              greatest(coalesce(attempt, 1) - 1, 0) AS k) p
  $$;
