// The mapping of failures to HTTP answers: every domain error to its status and code, Retry-After
// on 503s, and nothing internal in the body of an unexpected error.
import {
  ArgumentsHost,
  BadRequestException,
  HttpException,
  HttpStatus,
  Logger,
  NotFoundException,
  PayloadTooLargeException,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { AllExceptionsFilter, sendError, toErrorResponse } from './all-exceptions.filter';
import type { RouteMethods } from './route-methods';
import {
  AlreadyOrderedError,
  BusyError,
  DomainError,
  ERROR_STATUS,
  OrderInProgressError,
  OrderNotFoundError,
  ProductNotFoundError,
  QuantityOverLimitError,
  SoldOutError,
  OutcomeUnknownError,
  UnauthenticatedError,
  UnavailableError,
  ValidationFailedError,
} from './domain-errors';

describe('toErrorResponse', () => {
  it.each<{ name: string; err: DomainError; status: number; code: string }>([
    {
      name: 'ValidationFailedError',
      err: new ValidationFailedError('userId: bad'),
      status: 400,
      code: 'VALIDATION_FAILED',
    },
    { name: 'QuantityOverLimitError', err: new QuantityOverLimitError(2), status: 400, code: 'QUANTITY_OVER_LIMIT' },
    { name: 'UnauthenticatedError', err: new UnauthenticatedError(), status: 401, code: 'UNAUTHENTICATED' },
    { name: 'ProductNotFoundError', err: new ProductNotFoundError(7), status: 404, code: 'PRODUCT_NOT_FOUND' },
    { name: 'OrderNotFoundError', err: new OrderNotFoundError('9'), status: 404, code: 'ORDER_NOT_FOUND' },
    { name: 'AlreadyOrderedError', err: new AlreadyOrderedError(), status: 409, code: 'ALREADY_ORDERED' },
    { name: 'OrderInProgressError', err: new OrderInProgressError(), status: 409, code: 'ORDER_IN_PROGRESS' },
    { name: 'SoldOutError', err: new SoldOutError(0, 1), status: 410, code: 'SOLD_OUT' },
  ])('should answer $name with $status $code and no Retry-After', ({ err, status, code }) => {
    const out = toErrorResponse(err, 5);
    expect(out.body).toEqual({ statusCode: status, code, message: err.message });
    expect(out.retryAfterS).toBeUndefined();
  });

  it('should name the existing order in ALREADY_ORDERED when it is known', () => {
    expect(toErrorResponse(new AlreadyOrderedError(41)).body).toMatchObject({
      statusCode: 409,
      code: 'ALREADY_ORDERED',
      orderId: 41,
    });
  });

  it('should answer OutcomeUnknownError with 503 OUTCOME_UNKNOWN, its Retry-After, and not the cause', () => {
    const out = toErrorResponse(new OutcomeUnknownError(3, new Error('Connection terminated unexpectedly')), 1);
    expect(out.body).toMatchObject({ statusCode: 503, code: 'OUTCOME_UNKNOWN' });
    expect(out.body.message).not.toMatch(/terminated/);
    expect(out.retryAfterS).toBe(3);
  });

  it('should answer BusyError with 503 BUSY and its own Retry-After', () => {
    const out = toErrorResponse(new BusyError('every segment stayed locked', 7), 1);
    expect(out).toEqual({
      body: { statusCode: 503, code: 'BUSY', message: 'every segment stayed locked' },
      retryAfterS: 7,
    });
  });

  it('should answer UnavailableError with 503 UNAVAILABLE, its Retry-After, and not the cause', () => {
    const out = toErrorResponse(
      new UnavailableError('postgres', 4, new Error('connect ECONNREFUSED 10.0.0.5:5432 password=hunter2')),
      1,
    );
    expect(out.body).toMatchObject({ statusCode: 503, code: 'UNAVAILABLE' });
    expect(out.retryAfterS).toBe(4);
    expect(out.body.message).not.toMatch(/ECONNREFUSED|10\.0\.0\.5|hunter2/);
  });

  it('should fall back to the default Retry-After for a 503 domain error without its own', () => {
    class NoRetryBusy extends DomainError {
      readonly code = 'BUSY' as const;
    }
    expect(toErrorResponse(new NoRetryBusy('busy'), 6).retryAfterS).toBe(6);
  });

  it('should give every error code a status from 400 to 599', () => {
    for (const status of Object.values(ERROR_STATUS)) {
      expect(status).toBeGreaterThanOrEqual(400);
      expect(status).toBeLessThan(600);
    }
  });

  it('should answer an unknown route (Nest NotFoundException) with 404 NOT_FOUND', () => {
    const out = toErrorResponse(new NotFoundException('Cannot GET /secret/path'));
    expect(out.body).toEqual({ statusCode: 404, code: 'NOT_FOUND', message: 'no such route' });
    expect(out.retryAfterS).toBeUndefined();
  });

  it('should map the other HTTP exceptions to their stable codes', () => {
    expect(toErrorResponse(new PayloadTooLargeException('too big')).body).toMatchObject({
      statusCode: 413,
      code: 'PAYLOAD_TOO_LARGE',
    });
    expect(toErrorResponse(new HttpException('x', HttpStatus.UNSUPPORTED_MEDIA_TYPE)).body).toMatchObject({
      statusCode: 415,
      code: 'UNSUPPORTED_MEDIA_TYPE',
    });
    expect(toErrorResponse(new BadRequestException('bad')).body).toEqual({
      statusCode: 400,
      code: 'VALIDATION_FAILED',
      message: 'bad',
    });
    expect(toErrorResponse(new HttpException('nope', HttpStatus.UNAUTHORIZED)).body).toMatchObject({
      statusCode: 401,
      code: 'UNAUTHENTICATED',
    });
    expect(toErrorResponse(new HttpException('teapot', 418)).body).toMatchObject({
      statusCode: 418,
      code: 'VALIDATION_FAILED',
    });
  });

  it('should hide the message of a 5xx HTTP exception and add Retry-After to a 503', () => {
    const unavailable = toErrorResponse(new HttpException('db host 10.1.1.1 down', 503), 2);
    expect(unavailable).toEqual({
      body: { statusCode: 503, code: 'UNAVAILABLE', message: 'internal error' },
      retryAfterS: 2,
    });
    const internal = toErrorResponse(new HttpException('secret detail', 500), 2);
    expect(internal).toEqual({
      body: { statusCode: 500, code: 'INTERNAL', message: 'internal error' },
      retryAfterS: undefined,
    });
  });

  it.each([
    ['an Error', new Error('relation "orders" does not exist at /srv/app/dist/x.js:1:2')],
    ['a TypeError', new TypeError("Cannot read properties of undefined (reading 'id')")],
    ['a RangeError', new RangeError('Maximum call stack size exceeded')],
    ['a thrown string', 'boom'],
    ['undefined', undefined],
    ['a plain object', { code: '23505', detail: 'Key (user_id)=(alice) already exists' }],
  ])('should answer %s with 500 INTERNAL and no detail', (_name, err) => {
    const out = toErrorResponse(err, 3);
    expect(out.body).toEqual({ statusCode: 500, code: 'INTERNAL', message: 'internal error' });
    expect(out.retryAfterS).toBeUndefined();
  });
});

describe('toErrorResponse for refusals of the HTTP framework', () => {
  const fastifyError = (code: string, statusCode: number, message: string) =>
    Object.assign(new Error(message), { code, statusCode });

  it.each([
    {
      name: 'a body over the limit',
      err: fastifyError('FST_ERR_CTP_BODY_TOO_LARGE', 413, 'Request body is too large'),
      status: 413,
      code: 'PAYLOAD_TOO_LARGE',
    },
    {
      name: 'a body that is not JSON',
      err: fastifyError('FST_ERR_CTP_INVALID_JSON_BODY', 400, 'Body is not valid JSON'),
      status: 400,
      code: 'VALIDATION_FAILED',
    },
    {
      name: 'an unsupported media type',
      err: fastifyError('FST_ERR_CTP_INVALID_MEDIA_TYPE', 415, 'Unsupported Media Type'),
      status: 415,
      code: 'UNSUPPORTED_MEDIA_TYPE',
    },
    {
      name: 'a URL that cannot be decoded',
      err: fastifyError('FST_ERR_BAD_URL', 400, "'/orders/%zz' is not a valid url component"),
      status: 400,
      code: 'VALIDATION_FAILED',
    },
  ])('should answer $name with $status $code and its message', ({ err, status, code }) => {
    expect(toErrorResponse(err, 2)).toEqual({ body: { statusCode: status, code, message: err.message } });
  });

  it('should keep a 5xx framework error or a foreign error with a status internal', () => {
    expect(
      toErrorResponse(fastifyError('FST_ERR_REP_ALREADY_SENT', 500, 'Reply already sent at /srv/x.js')).body,
    ).toEqual({
      statusCode: 500,
      code: 'INTERNAL',
      message: 'internal error',
    });
    expect(toErrorResponse(fastifyError('ECONNRESET', 400, 'socket detail')).body).toEqual({
      statusCode: 500,
      code: 'INTERNAL',
      message: 'internal error',
    });
  });
});

describe('AllExceptionsFilter', () => {
  /** What Nest's HTTP adapter was asked to do with one response. */
  interface FakeReply {
    sentAlready: boolean;
    headers: Record<string, string>;
    statusCode: number;
    sent: unknown;
  }
  const fakeReply = (sentAlready = false): FakeReply => ({ sentAlready, headers: {}, statusCode: 0, sent: undefined });
  const adapter = {
    isHeadersSent: jest.fn((res: FakeReply) => res.sentAlready),
    setHeader: jest.fn((res: FakeReply, name: string, value: string) => {
      res.headers[name] = value;
    }),
    reply: jest.fn((res: FakeReply, body: unknown, statusCode: number) => {
      res.statusCode = statusCode;
      res.sent = body;
    }),
  };
  const filter = (retryAfterS: number) =>
    new AllExceptionsFilter({ httpAdapter: adapter } as unknown as HttpAdapterHost, retryAfterS);
  const hostFor = (res: FakeReply, req: unknown = { method: 'GET', url: '/', raw: { socket: { destroyed: false } } }) =>
    ({ switchToHttp: () => ({ getResponse: () => res, getRequest: () => req }) }) as unknown as ArgumentsHost;

  let errorLog: jest.SpyInstance;
  let warnLog: jest.SpyInstance;
  let debugLog: jest.SpyInstance;
  beforeEach(() => {
    errorLog = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    debugLog = jest.spyOn(Logger.prototype, 'debug').mockImplementation(() => undefined);
    warnLog = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => {
    jest.restoreAllMocks();
    jest.clearAllMocks();
  });

  it('should send a domain error as its status and body, without logging it as a failure', () => {
    const res = fakeReply();
    filter(1).catch(new SoldOutError(0, 1), hostFor(res));
    expect(res.statusCode).toBe(410);
    expect(res.sent).toEqual({ statusCode: 410, code: 'SOLD_OUT', message: 'sold out' });
    expect(adapter.setHeader).not.toHaveBeenCalled();
    expect(errorLog).not.toHaveBeenCalled();
  });

  it('should send Retry-After with a 503', () => {
    const res = fakeReply();
    filter(9).catch(new BusyError('busy', 3), hostFor(res));
    expect(res.statusCode).toBe(503);
    expect(res.headers['Retry-After']).toBe('3');
  });

  it('should log an unavailable dependency as a warning naming it and its cause', () => {
    const res = fakeReply();
    filter(1).catch(new UnavailableError('redis', 1, new Error('ECONNREFUSED')), hostFor(res));
    expect(warnLog).toHaveBeenCalledWith(expect.stringMatching(/redis.*ECONNREFUSED/));
    expect(res.sent).toMatchObject({ code: 'UNAVAILABLE' });
  });

  it('should log the stack of an unexpected error but send only INTERNAL', () => {
    const res = fakeReply();
    const err = new Error('secret internals');
    filter(1).catch(err, hostFor(res));
    expect(errorLog).toHaveBeenCalledWith(err.stack);
    expect(res.statusCode).toBe(500);
    expect(res.sent).toEqual({ statusCode: 500, code: 'INTERNAL', message: 'internal error' });
    expect(JSON.stringify(res.sent)).not.toContain('secret');
  });

  it('should send nothing when the response has already been sent', () => {
    const res = fakeReply(true);
    filter(1).catch(new Error('late'), hostFor(res));
    expect(adapter.reply).not.toHaveBeenCalled();
    expect(adapter.setHeader).not.toHaveBeenCalled();
  });

  it('should let sendError use the given default Retry-After for a 503 HTTP exception', () => {
    const res = fakeReply();
    sendError(adapter, res, new HttpException('down', 503), 8);
    expect(res.headers['Retry-After']).toBe('8');
    expect(res.statusCode).toBe(503);
  });

  it.each([
    ['a reset while the body arrived', Object.assign(new Error('aborted'), { code: 'ECONNRESET' }), false],
    ['a premature close', Object.assign(new Error('closed'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }), false],
    [
      'a write to a connection the client closed',
      Object.assign(new Error('x'), { code: 'ERR_STREAM_DESTROYED' }),
      true,
    ],
  ])("should count %s as the client's abort, at debug, and send nothing", (_name, err, destroyed) => {
    const res = fakeReply();
    const aborted = jest.fn();
    new AllExceptionsFilter({ httpAdapter: adapter } as unknown as HttpAdapterHost, 1, {
      clientAborted: aborted,
    }).catch(err, hostFor(res, { method: 'POST', url: '/orders', raw: { socket: { destroyed } } }));
    expect(aborted).toHaveBeenCalledTimes(1);
    expect(debugLog).toHaveBeenCalledWith(expect.stringMatching(/client went away/));
    expect(errorLog).not.toHaveBeenCalled();
    expect(adapter.reply).not.toHaveBeenCalled();
  });

  it("should keep logging the service's own fault as an error when its client has gone too", () => {
    const res = fakeReply();
    const aborted = jest.fn();
    const bug = new TypeError("Cannot read properties of undefined (reading 'id')");
    new AllExceptionsFilter({ httpAdapter: adapter } as unknown as HttpAdapterHost, 1, {
      clientAborted: aborted,
    }).catch(bug, hostFor(res, { method: 'POST', url: '/orders', raw: { socket: { destroyed: true } } }));
    expect(aborted).not.toHaveBeenCalled();
    expect(errorLog).toHaveBeenCalledWith(bug.stack);
  });

  it('should answer 405 METHOD_NOT_ALLOWED with Allow for a path the router knows under other methods', () => {
    const res = fakeReply();
    const routes = { allowed: jest.fn((url: string) => (url === '/orders' ? ['POST'] : [])) };
    const f = new AllExceptionsFilter({ httpAdapter: adapter } as unknown as HttpAdapterHost, 1, {
      routes: routes as unknown as RouteMethods,
    });
    f.catch(new NotFoundException(), hostFor(res, { method: 'PUT', url: '/orders' }));
    expect(res.statusCode).toBe(405);
    expect(res.headers.Allow).toBe('POST');
    expect(res.sent).toMatchObject({ code: 'METHOD_NOT_ALLOWED' });
    const other = fakeReply();
    f.catch(new NotFoundException(), hostFor(other, { method: 'GET', url: '/nowhere' }));
    expect(other.statusCode).toBe(404);
  });
});
