// A failed PostgreSQL call as the API answers it (common/database-errors.ts decides which domain
// error), with an outage also counted in flashsale_dependency_errors_total{dependency="postgres"}.
// The repositories of the order path and of the stock reads count; the admin routes' do not.
import { mapDatabaseError } from '../common/database-errors';
import { UnavailableError } from '../common/domain-errors';
import { MetricsService } from '../metrics/metrics.service';

export function mappedFailure(
  err: unknown,
  retryAfterS: number,
  metrics: Pick<MetricsService, 'dependencyErrors'>,
): unknown {
  const mapped = mapDatabaseError(err, retryAfterS);
  if (mapped instanceof UnavailableError) metrics.dependencyErrors.inc({ dependency: 'postgres' });
  return mapped;
}
