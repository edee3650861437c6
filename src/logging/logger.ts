// One pino logger per process carries every line: Nest's own, the primary's and the requests'.
// On a terminal the lines are pretty and coloured for a person; otherwise (a pipe, a file, a log
// collector) each line is one JSON object, from the first line on.
import { LoggerService } from '@nestjs/common';
import { Logger as NestPinoLogger, PinoLogger } from 'nestjs-pino';
import pino, { Logger } from 'pino';
import pretty from 'pino-pretty';
import { LoggingConfig } from '../config/app-config';

export function createLogger(config: LoggingConfig, stdout: { isTTY?: boolean } = process.stdout): Logger {
  if (!stdout.isTTY) return pino({ level: config.level });
  return pino(
    { level: config.level },
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

/** Nest's LoggerService over that logger, for Nest itself and for `new Logger(context)` anywhere. */
export function nestLogger(logger: Logger): LoggerService {
  const params = { pinoHttp: { logger } };
  return new NestPinoLogger(new PinoLogger(params), params);
}
