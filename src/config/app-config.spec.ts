// Configuration from the environment: defaults, parsing, and refusals that name the variable.
import { ConfigurationError, loadConfig } from './app-config';

function refusal(env: NodeJS.ProcessEnv): ConfigurationError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigurationError) return err;
    throw err;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
}

describe('loadConfig', () => {
  it('should use the documented defaults for an empty environment', () => {
    expect(loadConfig({})).toEqual({
      port: 3000,
      host: '0.0.0.0',
      databaseUrl: undefined,
      redisUrl: undefined,
      redisLockUrls: undefined,
      adminToken: undefined,
      workers: 1,
      orderHoldMs: 0,
      stockLocking: 'redlock',
      lockTtlMs: 2000,
      userLockTtlMs: 15_000,
      lockExtend: true,
      lockWaitMs: 5000,
      lockRetryDelayMs: 4,
      lockRetryJitterMs: 8,
      rebalanceWaitMs: 10_000,
      dbPoolSize: 20,
      dbTimeoutMs: 5000,
      redisTimeoutMs: 1000,
      retryAfterS: 1,
      productCacheMs: 1000,
      dataDir: '.data',
      logLevel: 'info',
    });
  });

  it('should read every variable it is given', () => {
    const c = loadConfig({
      PORT: '8080',
      HOST: '127.0.0.1',
      DATABASE_URL: 'postgres://u:p@db:5432/flashsale',
      REDIS_URL: 'redis://cache:6379',
      ADMIN_TOKEN: 'a-long-enough-admin-token',
      WORKERS: '4',
      ORDER_HOLD_MS: '20',
      STOCK_LOCKING: 'database',
      LOCK_TTL_MS: '500',
      LOCK_WAIT_MS: '0',
      LOCK_EXTEND: 'off',
      RETRY_AFTER_S: '3',
      LOG_LEVEL: 'warn',
    });
    expect(c).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      databaseUrl: 'postgres://u:p@db:5432/flashsale',
      redisUrl: 'redis://cache:6379',
      adminToken: 'a-long-enough-admin-token',
      workers: 4,
      orderHoldMs: 20,
      stockLocking: 'database',
      lockTtlMs: 500,
      lockWaitMs: 0,
      lockExtend: false,
      retryAfterS: 3,
      logLevel: 'warn',
    });
  });

  it('should parse REDIS_LOCK_URLS as a comma-separated list, trimming spaces', () => {
    const c = loadConfig({ REDIS_LOCK_URLS: 'redis://a:6379, redis://b:6380,rediss://c:6381' });
    expect(c.redisLockUrls).toEqual(['redis://a:6379', 'redis://b:6380', 'rediss://c:6381']);
    expect(loadConfig({ REDIS_LOCK_URLS: 'redis://only:6379' }).redisLockUrls).toEqual(['redis://only:6379']);
  });

  it('should trim integers and treat empty URLs and tokens as unset', () => {
    const c = loadConfig({ PORT: ' 4000 ', DATABASE_URL: '', REDIS_URL: '  ', ADMIN_TOKEN: '' });
    expect(c.port).toBe(4000);
    expect(c.databaseUrl).toBeUndefined();
    expect(c.redisUrl).toBeUndefined();
    expect(c.adminToken).toBeUndefined();
  });

  it.each([
    ['1', true],
    ['yes', true],
    ['ON', true],
    ['true', true],
    ['0', false],
    ['no', false],
    ['False', false],
  ])('should read LOCK_EXTEND=%s as %s', (value, expected) => {
    expect(loadConfig({ LOCK_EXTEND: value }).lockExtend).toBe(expected);
  });

  it('should ignore variables that are not its own', () => {
    expect(loadConfig({ PATH: '/usr/bin', HOME: '/root', NODE_ENV: 'production' }).port).toBe(3000);
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '-1'],
    ['PORT', '80.5'],
    ['PORT', '1e3'],
    ['WORKERS', '0'],
    ['WORKERS', '65'],
    ['ORDER_HOLD_MS', '-5'],
    ['STOCK_LOCKING', 'foo'],
    ['STOCK_LOCKING', 'REDLOCK'],
    ['ADMIN_TOKEN', 'short'],
    ['ADMIN_TOKEN', 'fifteen-chars!!'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,http://b:6379'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,,redis://b:6379'],
    ['REDIS_LOCK_URLS', 'a:6379'],
    ['REDIS_LOCK_URLS', 'redis://a:6379,'],
    ['DATABASE_URL', 'mysql://db/flashsale'],
    ['REDIS_URL', 'localhost:6379'],
    ['LOCK_TTL_MS', '10'],
    ['LOCK_WAIT_MS', 'soon'],
    ['LOCK_EXTEND', 'maybe'],
    ['RETRY_AFTER_S', '0'],
    ['LOG_LEVEL', 'verbose'],
  ])('should refuse %s=%j with a message that names it', (name, value) => {
    const err = refusal({ [name]: value });
    expect(err.message).toContain(`${name}=`);
    expect(err.message).toContain(JSON.stringify(value));
  });

  it('should name every bad variable at once', () => {
    const err = refusal({ PORT: 'abc', WORKERS: '0', STOCK_LOCKING: 'foo', PRODUCT_CACHE_MS: '1000' });
    expect(err.message).toMatch(/PORT=/);
    expect(err.message).toMatch(/WORKERS=/);
    expect(err.message).toMatch(/STOCK_LOCKING=/);
    expect(err.message).not.toMatch(/PRODUCT_CACHE_MS=/);
  });

  it('should accept the bounds of each range', () => {
    expect(loadConfig({ PORT: '0', WORKERS: '64', ADMIN_TOKEN: 'x'.repeat(16), LOCK_WAIT_MS: '60000' })).toMatchObject({
      port: 0,
      workers: 64,
      adminToken: 'x'.repeat(16),
      lockWaitMs: 60_000,
    });
  });
});
