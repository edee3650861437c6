// The crowd's two calls, answered before Nest's pipeline: a join (POST /products/:id/queue) and a
// poll (GET /products/:id/queue/:ticket). One Fastify preHandler, after the door's, that calls the
// same WaitingRoomService methods as WaitingRoomController and sends the same answers. Nest's
// router, pipes and class-validator cost a join about as much again as everything the join itself
// does (one process, 100 connections: 95 -> 63 µs of CPU a join, 52 -> 40 µs a poll), and a
// waiting room exists to take a crowd at about the cost of refusing it.
// Only well-formed calls are answered here: a valid product id and, for a join, a body that names
// a valid userId and nothing else. Anything else goes on to the controller, whose pipes answer it
// (400 VALIDATION_FAILED with the usual messages), and which the OpenAPI document describes. A
// failure thrown here reaches the same exception filter as the controller's.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { productIdFromPath } from '../common/ids';
import { normalUserId } from '../door/door.service';
import type { TicketView } from './ticket-status';
import { WaitingRoomService } from './waiting-room.service';
import { TicketResponse, toTicketResponse } from './dto/ticket-response.dto';

/** Sets Retry-After (when to poll again) and gives the body of a ticket's answer. */
export function paced(reply: FastifyReply, ticket: TicketView): TicketResponse {
  void reply.header('Retry-After', String(ticket.retryAfterS));
  return toTicketResponse(ticket);
}

/** The join's body when it is exactly `{ userId }` with a valid id, else null (left to the controller). */
function joiningUser(body: unknown): string | null {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return null;
  let userId: string | null = null;
  for (const key in body) {
    if (key !== 'userId') return null;
    userId = normalUserId((body as { userId: unknown }).userId);
  }
  return userId;
}

export function queueAnswers(room: WaitingRoomService) {
  return async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (reply.sent) return;
    const route = req.routeOptions.url;
    if (route !== '/products/:id/queue' && route !== '/products/:id/queue/:ticket') return;
    const params = req.params as { id: string; ticket?: string };
    const productId = productIdFromPath(params.id);
    if (Number.isNaN(productId)) return;
    if (params.ticket === undefined) {
      if (req.method !== 'POST') return;
      const userId = joiningUser(req.body);
      if (userId === null) return;
      const { ticket, created } = await room.join(productId, userId);
      void reply.code(created ? 201 : 200).send(paced(reply, ticket));
      return;
    }
    if (req.method !== 'GET') return;
    const caller = req.caller;
    const owner = caller?.kind === 'buyer' && caller.verified ? caller.userId : undefined;
    void reply.send(paced(reply, await room.ticket(productId, params.ticket, owner)));
  };
}
