import type { z } from 'zod';
import { ValidationError, formatIssues, type PalisadeErrorContext } from './errors.js';

/**
 * Parse `value` with `schema`; `what` names the boundary in the error, e.g. `input of activity charge`.
 * @throws ValidationError naming the field path and the problem.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function validate<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
  context: PalisadeErrorContext = {},
): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new ValidationError(what, formatIssues(parsed.error.issues), context);
  return parsed.data;
}
