// class-validator on every body: unknown fields refused, an absent field said to be required, a
// field of the wrong type said to be of the wrong type (once, without its ranges and lengths),
// failures as 400 VALIDATION_FAILED.
import { ValidationError, ValidationPipe } from '@nestjs/common';
import { ValidationFailedError } from './domain-errors';

/** The rules that say what JSON type a field is; the others (ranges, lengths, patterns) assume it. */
const TYPE_RULES = new Set(['isInt', 'isNumber', 'isString', 'isBoolean', 'isDate', 'isArray', 'isObject']);
const NUMBER_RULES = new Set(['isInt', 'isNumber']);

/** What is wrong with one field, by its own rules: its type alone when that is wrong, else every rule it breaks. */
function ownMessages(e: ValidationError, path: string, prefix: string): string[] {
  const constraints = e.constraints ?? {};
  const typeRules = Object.keys(constraints).filter((rule) => TYPE_RULES.has(rule));
  // "abc" for a count breaks its range rules too; saying them would hide the one thing to fix.
  if (typeRules.some((rule) => NUMBER_RULES.has(rule)) && typeof e.value !== 'number')
    return [`${path} must be a number`];
  const shown = typeRules.length > 0 ? typeRules.map((rule) => constraints[rule]) : Object.values(constraints);
  return shown.map((m) => (m.startsWith(e.property) ? prefix + m : `${path}: ${m}`));
}

function describe(errors: ValidationError[], prefix = ''): string[] {
  return errors.flatMap((e) => {
    const path = prefix + e.property;
    // An absent field fails every rule it has; one line says what is wrong.
    if (e.value === undefined && e.constraints && !e.children?.length) return [`${path} is required`];
    return [...ownMessages(e, path, prefix), ...describe(e.children ?? [], `${path}.`)];
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
