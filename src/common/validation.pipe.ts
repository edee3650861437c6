// class-validator on every body: unknown fields refused, failures as 400 VALIDATION_FAILED.
import { ValidationError, ValidationPipe } from '@nestjs/common';
import { ValidationFailedError } from './domain-errors';

function describe(errors: ValidationError[], prefix = ''): string[] {
  return errors.flatMap((e) => {
    const path = prefix + e.property;
    const own = Object.values(e.constraints ?? {});
    return [
      ...own.map((m) => (m.startsWith(e.property) ? prefix + m : `${path}: ${m}`)),
      ...describe(e.children ?? [], `${path}.`),
    ];
  });
}

export function validationPipe(): ValidationPipe {
  return new ValidationPipe({
    transform: true,
    whitelist: true,
    forbidNonWhitelisted: true,
    forbidUnknownValues: true,
    validationError: { target: false, value: false },
    exceptionFactory: (errors) =>
      new ValidationFailedError(describe(errors).slice(0, 10).join('; ') || 'invalid request body'),
  });
}
