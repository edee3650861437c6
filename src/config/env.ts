// How a configuration area reads the environment: `@Env` ties a property to its variable (and
// records the pair, so that a refusal names the variable, not the property), the transforms turn
// the variables' text into values for class-validator, and the variables whose values are never
// shown. The areas themselves are in app-config.ts.
import { Expose } from 'class-transformer';
import { registerDecorator, ValidationOptions } from 'class-validator';

export type AreaClass = new () => object;

/** Property name -> environment variable, per area class; read back to name bad variables. */
const envNames = new Map<AreaClass, Map<string, string>>();

/** The variables an area reads, by property name. */
export function envNamesOf(area: AreaClass): Map<string, string> {
  return envNames.get(area) ?? new Map<string, string>();
}

/**
 * Variables whose value is never written back, valid or not (a refusal names the variable and the
 * rule only): tokens and keys, and URLs, which may carry a password.
 */
export const SECRET_VARIABLES: ReadonlySet<string> = new Set([
  'ADMIN_TOKEN',
  'SHOP_TOKEN',
  'BUYER_JWT_SECRET',
  'ADMISSION_SECRET',
  'WEBHOOK_SECRET',
  'WEBHOOK_URL',
  'DATABASE_URL',
  'REDIS_URL',
  'REDIS_LOCK_URLS',
  'REDIS_CLUSTER_NODES',
]);

/** Reads this property from the environment variable `name`. */
export function Env(name: string): PropertyDecorator {
  return (target, property) => {
    Expose({ name })(target, property);
    const area = target.constructor as AreaClass;
    const names = envNames.get(area) ?? new Map<string, string>();
    names.set(String(property), name);
    envNames.set(area, names);
  };
}

export const toInt = ({ value }: { value: unknown }) =>
  typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value;
export const toBool = ({ value }: { value: unknown }) => {
  if (typeof value !== 'string') return value;
  const v = value.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  return value;
};
export const toNumber = ({ value }: { value: unknown }) =>
  typeof value === 'string' && /^\d+(\.\d+)?$/.test(value.trim()) ? Number(value.trim()) : value;
export const emptyToUndefined = ({ value }: { value: unknown }) =>
  typeof value === 'string' && value.trim() === '' ? undefined : value;
export const toList = ({ value }: { value: unknown }) =>
  typeof value === 'string' && value.trim() !== ''
    ? value.split(',').map((part) => part.trim())
    : emptyToUndefined({ value });

export const toIntList = ({ value }: { value: unknown }) =>
  typeof value === 'string' && value.trim() !== ''
    ? value.split(',').map((part) => (/^\d+$/.test(part.trim()) ? Number(part.trim()) : part.trim()))
    : value;

/** Each element larger than the one before. */
export function IsRising(options: ValidationOptions): PropertyDecorator {
  return (target, property) =>
    registerDecorator({
      name: 'isRising',
      target: target.constructor,
      propertyName: String(property),
      options,
      validator: {
        validate: (v: unknown) => Array.isArray(v) && v.every((x, i) => i === 0 || Number(x) > Number(v[i - 1])),
      },
    });
}
