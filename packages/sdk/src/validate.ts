import type { z } from 'zod';
import { InvalidOptionsError, ValidationError, formatIssues, type PalisadeErrorContext } from './errors.js';

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

/**
 * Parse the options of a call with their (strict) schema; `where` names the call in the error, e.g.
 * `start options of settle`.
 * @throws InvalidOptionsError naming each bad option; an old option name is answered with the new one where this
 * schema takes it (see {@link formatIssues}).
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function parseOptions<S extends z.ZodType>(schema: S, options: unknown, where: string): z.output<S> {
  const parsed = schema.safeParse(options);
  if (!parsed.success) {
    throw new InvalidOptionsError(where, formatIssues(parsed.error.issues, { schema, input: options }));
  }
  return parsed.data;
}
