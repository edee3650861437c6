// The service's whole configuration: read from the environment once, validated with
// class-validator, and refused at start with a message that names every bad variable.
import { plainToInstance, Transform } from 'class-transformer';
import {
  IsBoolean,
  IsIn,
  IsInt,
  IsOptional,
  IsString,
  Matches,
  Max,
  Min,
  MinLength,
  validateSync,
} from 'class-validator';

export type StockLocking = 'redlock' | 'database';

const toInt = ({ value }: { value: unknown }) =>
  typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : value;
const toBool = ({ value }: { value: unknown }) => {
  if (typeof value !== 'string') return value;
  const v = value.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  return value;
};
const emptyToUndefined = ({ value }: { value: unknown }) =>
  typeof value === 'string' && value.trim() === '' ? undefined : value;

/** The environment as the operator writes it; names match the variables one to one. */
export class EnvironmentVariables {
  @Transform(toInt) @IsInt() @Min(0) @Max(65535) PORT = 3000;
  @IsString() HOST = '0.0.0.0';

  @Transform(emptyToUndefined) @IsOptional() @Matches(/^postgres(ql)?:\/\/.+/, { message: 'DATABASE_URL must be a postgres:// URL' })
  DATABASE_URL?: string;

  @Transform(emptyToUndefined) @IsOptional() @Matches(/^rediss?:\/\/.+/, { message: 'REDIS_URL must be a redis:// URL' })
  REDIS_URL?: string;

  @Transform(emptyToUndefined) @IsOptional() @Matches(/^rediss?:\/\/[^,]+(,\s*rediss?:\/\/[^,]+)*$/, {
    message: 'REDIS_LOCK_URLS must be a comma-separated list of redis:// URLs',
  })
  REDIS_LOCK_URLS?: string;

  @Transform(emptyToUndefined) @IsOptional() @IsString() @MinLength(16, { message: 'ADMIN_TOKEN must be at least 16 characters' })
  ADMIN_TOKEN?: string;

  @Transform(toInt) @IsInt() @Min(1) @Max(64) WORKERS = 1;

  /** Simulated downstream work held inside the segment lock (benchmarks). */
  @Transform(toInt) @IsInt() @Min(0) @Max(10_000) ORDER_HOLD_MS = 0;

  /** redlock: Redis segment and user locks (the product); database: only PostgreSQL row locks (the benchmark's peer). */
  @IsIn(['redlock', 'database']) STOCK_LOCKING: StockLocking = 'redlock';

  @Transform(toInt) @IsInt() @Min(50) @Max(60_000) LOCK_TTL_MS = 2000;
  @Transform(toInt) @IsInt() @Min(50) @Max(120_000) USER_LOCK_TTL_MS = 15_000;
  /** Extend a held lock before it expires, so a slow critical section keeps it. */
  @Transform(toBool) @IsBoolean() LOCK_EXTEND = true;
  /** Longest an order waits for a segment lock when every live segment is busy. */
  @Transform(toInt) @IsInt() @Min(0) @Max(60_000) LOCK_WAIT_MS = 5000;
  @Transform(toInt) @IsInt() @Min(1) @Max(10_000) LOCK_RETRY_DELAY_MS = 4;
  @Transform(toInt) @IsInt() @Min(0) @Max(10_000) LOCK_RETRY_JITTER_MS = 8;
  /** Longest a rebalance waits for the segment row locks (capped by DB_TIMEOUT_MS). */
  @Transform(toInt) @IsInt() @Min(100) @Max(120_000) REBALANCE_WAIT_MS = 10_000;

  @Transform(toInt) @IsInt() @Min(1) @Max(500) DB_POOL_SIZE = 20;
  @Transform(toInt) @IsInt() @Min(100) @Max(120_000) DB_TIMEOUT_MS = 5000;
  @Transform(toInt) @IsInt() @Min(50) @Max(60_000) REDIS_TIMEOUT_MS = 1000;
  @Transform(toInt) @IsInt() @Min(1) @Max(3600) RETRY_AFTER_S = 1;
  @Transform(toInt) @IsInt() @Min(0) @Max(60_000) PRODUCT_CACHE_MS = 1000;

  /** Where the embedded PostgreSQL keeps its data when DATABASE_URL is unset. */
  @IsString() DATA_DIR = '.data';
  @IsIn(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) LOG_LEVEL = 'info';
}

export interface AppConfig {
  port: number;
  host: string;
  databaseUrl?: string;
  redisUrl?: string;
  redisLockUrls?: string[];
  adminToken?: string;
  workers: number;
  orderHoldMs: number;
  stockLocking: StockLocking;
  lockTtlMs: number;
  userLockTtlMs: number;
  lockExtend: boolean;
  lockWaitMs: number;
  lockRetryDelayMs: number;
  lockRetryJitterMs: number;
  rebalanceWaitMs: number;
  dbPoolSize: number;
  dbTimeoutMs: number;
  redisTimeoutMs: number;
  retryAfterS: number;
  productCacheMs: number;
  dataDir: string;
  logLevel: string;
}

/** Config with every dependency URL resolved (after embedded servers have started). */
export type ResolvedConfig = AppConfig & { databaseUrl: string; redisUrl: string; redisLockUrls: string[]; adminToken: string };

export class ConfigurationError extends Error {}

/** Validates the environment; throws ConfigurationError naming each bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): AppConfig {
  const known = Object.keys(new EnvironmentVariables());
  const picked: Record<string, unknown> = {};
  for (const key of [...known, 'DATABASE_URL', 'REDIS_URL', 'REDIS_LOCK_URLS', 'ADMIN_TOKEN']) {
    if (env[key] !== undefined) picked[key] = env[key];
  }
  const vars = plainToInstance(EnvironmentVariables, picked, { exposeDefaultValues: true });
  const errors = validateSync(vars, { whitelist: true });
  if (errors.length > 0) {
    const lines = errors.map((e) => {
      const given = JSON.stringify(picked[e.property]);
      return `  ${e.property}=${given}: ${Object.values(e.constraints ?? {}).join('; ')}`;
    });
    throw new ConfigurationError(`Invalid configuration:\n${lines.join('\n')}`);
  }
  return {
    port: vars.PORT,
    host: vars.HOST,
    databaseUrl: vars.DATABASE_URL,
    redisUrl: vars.REDIS_URL,
    redisLockUrls: vars.REDIS_LOCK_URLS?.split(',').map((u) => u.trim()),
    adminToken: vars.ADMIN_TOKEN,
    workers: vars.WORKERS,
    orderHoldMs: vars.ORDER_HOLD_MS,
    stockLocking: vars.STOCK_LOCKING,
    lockTtlMs: vars.LOCK_TTL_MS,
    userLockTtlMs: vars.USER_LOCK_TTL_MS,
    lockExtend: vars.LOCK_EXTEND,
    lockWaitMs: vars.LOCK_WAIT_MS,
    lockRetryDelayMs: vars.LOCK_RETRY_DELAY_MS,
    lockRetryJitterMs: vars.LOCK_RETRY_JITTER_MS,
    rebalanceWaitMs: vars.REBALANCE_WAIT_MS,
    dbPoolSize: vars.DB_POOL_SIZE,
    dbTimeoutMs: vars.DB_TIMEOUT_MS,
    redisTimeoutMs: vars.REDIS_TIMEOUT_MS,
    retryAfterS: vars.RETRY_AFTER_S,
    productCacheMs: vars.PRODUCT_CACHE_MS,
    dataDir: vars.DATA_DIR,
    logLevel: vars.LOG_LEVEL,
  };
}

/** Nest injection token for the resolved configuration. */
export const APP_CONFIG = Symbol('APP_CONFIG');
