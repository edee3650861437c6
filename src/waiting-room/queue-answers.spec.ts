import type { FastifyReply, FastifyRequest } from 'fastify';
import { queueAnswers } from './queue-answers';
import type { TicketView } from './ticket-status';
import type { WaitingRoomService } from './waiting-room.service';

const view: TicketView = {
  id: 'signed',
  lotteryId: 'lottery',
  productId: 7,
  userId: 'u1',
  status: 'waiting',
  position: 3,
  ahead: 2,
  estimatedWaitS: 4,
  retryAfterS: 2,
};

function call(method: string, url: string, params: Record<string, string>, body?: unknown) {
  const room = {
    join: jest.fn().mockResolvedValue({ ticket: view, created: true }),
    ticket: jest.fn().mockResolvedValue(view),
  };
  const sent: { code?: number; headers: Record<string, string>; body?: unknown } = { headers: {} };
  const reply = {
    sent: false,
    code(c: number) {
      sent.code = c;
      return this;
    },
    header(k: string, v: string) {
      sent.headers[k] = v;
      return this;
    },
    send(b: unknown) {
      sent.body = b;
      return this;
    },
  };
  const req = { method, routeOptions: { url }, params, body } as unknown as FastifyRequest;
  return {
    room,
    sent,
    run: () => queueAnswers(room as unknown as WaitingRoomService)(req, reply as unknown as FastifyReply),
  };
}

describe('queueAnswers', () => {
  it('answers a well-formed join with the ticket, 201 and Retry-After', async () => {
    const c = call('POST', '/products/:id/queue', { id: '7' }, { userId: 42 });
    await c.run();
    expect(c.room.join).toHaveBeenCalledWith(7, '42');
    expect(c.sent).toMatchObject({ code: 201, headers: { 'Retry-After': '2' }, body: { id: 'signed', position: 3 } });
  });

  it('answers a poll of a valid product id with the ticket', async () => {
    const c = call('GET', '/products/:id/queue/:ticket', { id: '7', ticket: 'signed' });
    await c.run();
    expect(c.room.ticket).toHaveBeenCalledWith(7, 'signed', undefined);
    expect(c.sent.body).toMatchObject({ status: 'waiting', ahead: 2 });
  });

  it.each([
    ['a bad product id', 'POST', '/products/:id/queue', { id: '07' }, { userId: 'u1' }],
    ['no body', 'POST', '/products/:id/queue', { id: '7' }, undefined],
    ['an array body', 'POST', '/products/:id/queue', { id: '7' }, ['u1']],
    ['an unknown field', 'POST', '/products/:id/queue', { id: '7' }, { userId: 'u1', extra: 1 }],
    ['a bad userId', 'POST', '/products/:id/queue', { id: '7' }, { userId: 'a b' }],
    ['no userId', 'POST', '/products/:id/queue', { id: '7' }, {}],
    ['a poll of a bad product id', 'GET', '/products/:id/queue/:ticket', { id: 'x', ticket: 't' }, undefined],
    ['another route', 'GET', '/products/:id/queue/fairness', { id: '7' }, undefined],
  ])('leaves %s to the controller', async (_what, method, url, params, body) => {
    const c = call(method, url, params, body);
    await c.run();
    expect(c.room.join).not.toHaveBeenCalled();
    expect(c.room.ticket).not.toHaveBeenCalled();
    expect(c.sent.body).toBeUndefined();
  });
});
