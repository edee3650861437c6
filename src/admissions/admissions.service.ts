// Admissions: the signed permission to order that the waiting room hands out and the order path
// checks. Both sides use this service, so neither imports the other. The key is ADMISSION_SECRET,
// or one made once and kept in PostgreSQL so that every process of a deployment shares it; the
// waiting room's ticket tokens are signed with a key derived from it.
import { createHmac } from 'node:crypto';
import { Injectable, OnModuleInit } from '@nestjs/common';
import { AdmissionInvalidError, AdmissionRequiredError, UnavailableError } from '../common/domain-errors';
import { GroupedCalls } from '../common/grouped-calls';
import { HttpConfig, WaitingRoomConfig } from '../config/app-config';
import { Admission, AdmissionTokens } from './admission-tokens';
import { AdmissionsRepository } from './admissions.repository';

@Injectable()
export class AdmissionsService implements OnModuleInit {
  private admissionTokens: AdmissionTokens | null = null;
  private key: Buffer | null = null;
  private readonly lookups = new GroupedCalls<number, string | null>((productId, positions) =>
    this.repo.spentBy(productId, positions),
  );

  constructor(
    private readonly config: WaitingRoomConfig,
    private readonly http: HttpConfig,
    private readonly repo: AdmissionsRepository,
  ) {}

  async onModuleInit(): Promise<void> {
    this.key = this.config.secret
      ? Buffer.from(this.config.secret, 'utf8')
      : await this.repo.sharedSecret('admission-token-key');
    this.admissionTokens = new AdmissionTokens(this.key);
  }

  /** A key for another kind of token, derived from the admission key (a token of one kind never passes as the other). */
  derivedKey(purpose: string): Buffer {
    if (this.key === null) throw new Error('the admission key is not loaded yet');
    return createHmac('sha256', this.key).update(purpose).digest();
  }

  issue(a: Admission): string {
    return this.tokens.issue(a);
  }

  /**
   * The order path's check for a product with a waiting room: the queue position a valid admission
   * carries, not yet spent by an order. ADMISSION_REQUIRED or ADMISSION_INVALID otherwise.
   */
  async check(productId: number, userId: string, admission: string | undefined): Promise<number> {
    if (admission === undefined) throw new AdmissionRequiredError(productId);
    const a = this.tokens.verify(admission, userId, productId);
    const spent = await this.spentBy(productId, a.position);
    if (spent !== null) throw new AdmissionInvalidError(`it was spent by order ${spent}`);
    return a.position;
  }

  /**
   * The order that spent an admitted position, or null; UNAVAILABLE when PostgreSQL cannot say.
   * Asked by every admitted buyer's poll and order: the lookups of one product that come while one
   * is out go together in the next statement.
   */
  spentBy(productId: number, position: number): Promise<string | null> {
    return this.lookups.take(productId, position).catch((err) => {
      throw new UnavailableError('postgres', this.http.retryAfterS, err);
    });
  }

  private get tokens(): AdmissionTokens {
    if (this.admissionTokens === null) throw new Error('the admission key is not loaded yet');
    return this.admissionTokens;
  }
}
