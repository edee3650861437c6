// One pino logger per process carries every line: Nest's own, the primary's and the requests'.
// On a terminal the lines are pretty and coloured for a person; otherwise (a pipe, a file, a log
// collector) each line is one JSON object, from the first line on.
import { LoggerService, RequestMethod } from '@nestjs/common';
import { Logger as NestPinoLogger, Params, PinoLogger } from 'nestjs-pino';
import pino, { Logger, LoggerOptions } from 'pino';
import pretty from 'pino-pretty';
import { LoggingConfig } from '../config/app-config';

export function createLogger(config: LoggingConfig, stdout: { isTTY?: boolean } = process.stdout): Logger {
  // On the logger itself: pino-http, given a logger, applies none of its own pino options.
  const options: LoggerOptions = { level: config.level, redact: ['req.headers.authorization', 'req.headers.cookie'] };
  if (!stdout.isTTY) return pino(options);
  return pino(
    options,
    // Synchronous, so a line written just before process.exit is not lost.
    pretty({
      colorize: true,
      sync: true,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,context',
      messageFormat: '{if context}[{context}] {end}{msg}',
    }),
  );
}

/**
 * nestjs-pino's parameters over that logger. nestjs-pino 5 builds its one pino-http instance from
 * whichever parameters reach it first (Nest's logger below, or the LoggerModule), so both must be
 * these very ones.
 */
export function loggerParams(logger: Logger): Params {
  return {
    // Request logging is mounted only where its lines are written (debug, trace): pino-http builds a
    // child logger per request even when it writes nothing, which cost about a third of an order's
    // CPU at info (measured). The price: at info, a warning logged inside a request carries no
    // request id. Every route is named: nestjs-pino 5's default ('{/*splat}') matches nothing under
    // Nest's Fastify adapter.
    forRoutes: logger.isLevelEnabled('debug') ? [{ path: '{*path}', method: RequestMethod.ALL }] : [],
    pinoHttp: {
      // The process's one logger, so request lines and every other line share one format.
      logger,
      // The request id is Fastify's (main.ts genReqId), which pino-http logs as it finds it.
      // Lines of a request carry its id only, not the whole request serialised again.
      quietReqLogger: true,
      // Access lines are debug: at thousands of orders a second they would cost more than the order.
      customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'warn' : 'debug'),
    },
  };
}

/**
 * Nest's own start-up lines: one per module and per route, about fifty at every start and in every
 * worker. They say how Nest assembled itself, which a developer may want (LOG_LEVEL=debug) and an
 * operator does not: at info the start log is the servers, the migrations, where it listens.
 */
const NEST_ASSEMBLY = new Set(['NestFactory', 'InstanceLoader', 'RoutesResolver', 'RouterExplorer', 'NestApplication']);

class OperatorsNestLogger extends NestPinoLogger {
  override log(message: unknown, ...optionalParams: unknown[]): void {
    // Nest passes the context last.
    if (NEST_ASSEMBLY.has(optionalParams.at(-1) as string)) return super.debug(message, ...optionalParams);
    super.log(message, ...optionalParams);
  }
}

/** Nest's LoggerService over that logger, for Nest itself and for `new Logger(context)` anywhere. */
export function nestLogger(logger: Logger): LoggerService {
  const params = loggerParams(logger);
  return new OperatorsNestLogger(new PinoLogger(params), params);
}
