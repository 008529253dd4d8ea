/**
 * What a promise rejected with, for tests that assert on an error's fields (`code`, context, `cause`) rather
 * than only on its message: `rejectionOf` for any error, `palisadeRejectionOf` for the engine's own errors.
 */
import { PalisadeError } from '@palisade/sdk';

/**
 * Resolve with what `promise` rejected with.
 * @throws Error when `promise` resolved.
 */
export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection, but the promise resolved');
}

/**
 * Resolve with the {@link PalisadeError} `promise` rejected with.
 * @throws Error when `promise` resolved, or rejected with anything but a `PalisadeError`.
 */
export async function palisadeRejectionOf(promise: Promise<unknown>): Promise<PalisadeError> {
  const error = await rejectionOf(promise);
  if (!(error instanceof PalisadeError)) throw new Error(`expected a PalisadeError, got ${String(error)}`);
  return error;
}
