// The admin guard lets through exactly `Authorization: Bearer <ADMIN_TOKEN>` and nothing else.
import { ExecutionContext } from '@nestjs/common';
import { UnauthenticatedError } from '../common/domain-errors';
import { AdminTokenGuard } from './admin-token.guard';

const TOKEN = 'unit-admin-token-0123456789';

function contextWith(headers: Record<string, string | undefined>): ExecutionContext {
  return { switchToHttp: () => ({ getRequest: () => ({ headers }) }) } as unknown as ExecutionContext;
}

describe('AdminTokenGuard', () => {
  const guard = new AdminTokenGuard({ token: TOKEN });

  it('should accept the exact bearer token', () => {
    expect(guard.canActivate(contextWith({ authorization: `Bearer ${TOKEN}` }))).toBe(true);
  });

  it('should accept the scheme in any letter case, as HTTP auth schemes are case-insensitive', () => {
    expect(guard.canActivate(contextWith({ authorization: `bearer ${TOKEN}` }))).toBe(true);
    expect(guard.canActivate(contextWith({ authorization: `BEARER ${TOKEN}` }))).toBe(true);
  });

  it.each([
    ['no Authorization header', undefined],
    ['an empty header', ''],
    ['a wrong token', 'Bearer unit-admin-token-9876543210'],
    ['a token one character short', `Bearer ${TOKEN.slice(0, -1)}`],
    ['the token with a suffix', `Bearer ${TOKEN}x`],
    ['the token with a trailing space', `Bearer ${TOKEN} `],
    ['two spaces after Bearer', `Bearer  ${TOKEN}`],
    ['an empty bearer', 'Bearer '],
    ['the token without a scheme', TOKEN],
    ['the token under the Basic scheme', `Basic ${TOKEN}`],
    ['the token under the Token scheme', `Token ${TOKEN}`],
    ['the token sent twice', `Bearer ${TOKEN}, Bearer ${TOKEN}`],
  ])('should refuse %s with UnauthenticatedError', (_name, authorization) => {
    expect(() => guard.canActivate(contextWith({ authorization }))).toThrow(UnauthenticatedError);
  });

  it('should compare against its own configured token, not a fixed one', () => {
    const other = new AdminTokenGuard({ token: 'another-admin-token-abcdef' });
    expect(() => other.canActivate(contextWith({ authorization: `Bearer ${TOKEN}` }))).toThrow(UnauthenticatedError);
    expect(other.canActivate(contextWith({ authorization: 'Bearer another-admin-token-abcdef' }))).toBe(true);
  });

  it('should accept a token with non-ASCII characters only when it matches exactly', () => {
    const unicode = new AdminTokenGuard({ token: 'jeton-sécurisé-für-admin' });
    expect(unicode.canActivate(contextWith({ authorization: 'Bearer jeton-sécurisé-für-admin' }))).toBe(true);
    expect(() => unicode.canActivate(contextWith({ authorization: 'Bearer jeton-securise-fur-admin' }))).toThrow(
      UnauthenticatedError,
    );
  });
});
