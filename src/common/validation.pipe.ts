// class-validator on every body: unknown fields refused, an absent field said to be required,
// failures as 400 VALIDATION_FAILED.
import { ValidationError, ValidationPipe } from '@nestjs/common';
import { ValidationFailedError } from './domain-errors';

function describe(errors: ValidationError[], prefix = ''): string[] {
  return errors.flatMap((e) => {
    const path = prefix + e.property;
    // An absent field fails every rule it has; one line says what is wrong.
    if (e.value === undefined && e.constraints && !e.children?.length) return [`${path} is required`];
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
    // The value is kept to tell an absent field from a wrong one; messages never show it.
    validationError: { target: false, value: true },
    exceptionFactory: (errors) =>
      new ValidationFailedError(describe(errors).slice(0, 10).join('; ') || 'invalid request body'),
  });
}
