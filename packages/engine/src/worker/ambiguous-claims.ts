import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { findClaimedByRequest } from '../queries/find-claimed-by-request.js';
import { releaseStep } from '../queries/release-step.js';
import type { SchemaNames } from '../queries/schema-names.js';

/**
 * Claims whose outcome the connection lost (a transient error after the statement was sent), by their request id:
 * if one committed, what it took is released at the next maintenance (I15) — never run a step claimed long ago.
 */
export class AmbiguousClaims {
  private readonly unsettled: string[] = [];

  constructor(
    private readonly o: { readonly db: Database; readonly names: SchemaNames; readonly logger: Logger },
  ) {}

  /** A claim with this request id may have committed. */
  add(claimRequestId: string): void {
    this.unsettled.push(claimRequestId);
  }

  /** Release what each ambiguous claim took, if it committed; a claim stays listed until its read succeeds. */
  async settle(): Promise<void> {
    const { db, names, logger } = this.o;
    while (this.unsettled.length > 0) {
      const requestId = this.unsettled[0] as string;
      const rows = await findClaimedByRequest(db, names, requestId);
      for (const r of rows) {
        try {
          await releaseStep(db, names, {
            runId: r.run_id,
            stepId: r.id,
            stepLabel: `${r.name}#${r.seq}`,
            attempt: r.attempt,
            token: BigInt(r.token),
            nonce: r.nonce,
            why: 'ambiguous-claim',
          });
        } catch (error) {
          logger.info({ err: error, step: r.id }, 'worker:ambiguous-claim-not-released');
        }
      }
      this.unsettled.shift();
    }
  }
}
