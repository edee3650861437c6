import { before, formatCursor, parseCursor, START } from './event-cursor';

describe('event cursors', () => {
  it('read back what they write', () => {
    expect(parseCursor(formatCursor({ tx: '1234', id: '98765' }))).toEqual({ tx: '1234', id: '98765' });
    expect(parseCursor('0-0')).toEqual(START);
    expect(parseCursor('9223372036854775807-1')).toEqual({ tx: '9223372036854775807', id: '1' });
  });

  it.each(['', '-', '1', '1-', '-1', '01-2', '1-02', '1-2-3', ' 1-2', '1-2 ', 'a-1', '1.5-2', '9223372036854775808-1'])(
    'refuse %j',
    (text) => expect(parseCursor(text)).toBeNull(),
  );

  it('order by transaction, then by id, as numbers rather than strings', () => {
    expect(before({ tx: '9', id: '100' }, { tx: '10', id: '1' })).toBe(true);
    expect(before({ tx: '10', id: '2' }, { tx: '10', id: '10' })).toBe(true);
    expect(before({ tx: '10', id: '10' }, { tx: '10', id: '10' })).toBe(false);
    expect(before({ tx: '11', id: '1' }, { tx: '10', id: '99' })).toBe(false);
  });
});
