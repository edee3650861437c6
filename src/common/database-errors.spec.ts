// How a failed write is classified: whether PostgreSQL may have committed it decides between
// UNAVAILABLE (nothing happened) and settling the outcome by the order's key.
import { QueryFailedError } from 'typeorm';
import { DatabaseError } from 'pg';
import { UnavailableError } from './domain-errors';
import { mapDatabaseError, writeFailure } from './database-errors';

const sent = (driverError: Error) => new QueryFailedError('INSERT ...', [], driverError);
function serverError(code: string, severity: string): DatabaseError {
  const e = new DatabaseError('from the server', 0, 'error');
  e.code = code;
  e.severity = severity;
  return e;
}
const errno = (code: string, message: string) => Object.assign(new Error(message), { code });

describe('writeFailure', () => {
  it.each([
    ['a refused connection from the pool', errno('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5432')],
    ['the pool timing out while waiting for a connection', new Error('timeout exceeded when trying to connect')],
    ['a connection closed while connecting', new Error('Connection terminated due to connection timeout')],
    [
      'a broken client refusing the query',
      sent(new Error('Client has encountered a connection error and is not queryable')),
    ],
    ['a closed client refusing the query', sent(new Error('Client was closed and is not queryable'))],
  ])('should call %s not-sent', (_name, err) => {
    expect(writeFailure(err)).toBe('not-sent');
  });

  it.each([
    ['a server-side statement timeout (57014)', serverError('57014', 'ERROR')],
    ['a unique violation', serverError('23505', 'ERROR')],
    ['a deadlock', serverError('40P01', 'ERROR')],
  ])('should call %s rejected: the statement was rolled back', (_name, err) => {
    expect(writeFailure(sent(err))).toBe('rejected');
  });

  it.each([
    ['a connection terminated during the statement', new Error('Connection terminated unexpectedly')],
    ['a reset connection', errno('ECONNRESET', 'read ECONNRESET')],
    ['the client-side query timeout', new Error('Query read timeout')],
    ['a FATAL admin shutdown (57P01)', serverError('57P01', 'FATAL')],
    ['a FATAL crash shutdown (57P02)', serverError('57P02', 'FATAL')],
  ])('should call %s unknown: it may have committed', (_name, err) => {
    expect(writeFailure(sent(err))).toBe('unknown');
  });
});

describe('mapDatabaseError', () => {
  it.each([
    [
      'a FATAL idle-in-transaction timeout (25P03): the server ended the session and rolled back',
      serverError('25P03', 'FATAL'),
    ],
    ['a FATAL transaction timeout (25P04)', serverError('25P04', 'FATAL')],
    ['a FATAL admin shutdown (57P01)', serverError('57P01', 'FATAL')],
    ['a server-side statement timeout (57014)', serverError('57014', 'ERROR')],
    ['a terminated connection', new Error('Connection terminated unexpectedly')],
  ])('should answer UNAVAILABLE for %s', (_name, err) => {
    expect(mapDatabaseError(sent(err), 1)).toBeInstanceOf(UnavailableError);
  });

  it('should leave an ERROR that is no outage as it is (a bug, not a 503)', () => {
    const err = sent(serverError('23514', 'ERROR'));
    expect(mapDatabaseError(err, 1)).toBe(err);
  });
});
