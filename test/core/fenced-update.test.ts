import { describe, expect, it } from 'vitest';
import { fencedUpdateStatement } from '../../src/core/fenced-update.js';
import { fencingHeaders } from '../../src/core/record.js';

describe('fencedUpdateStatement', () => {
  it('writes the columns and the token only where the row holds a smaller token', () => {
    const statement = fencedUpdateStatement({ table: 'app.accounts', id: 7, set: { balance: 900, note: 'x' }, fencingToken: '18446744073709551' }, (n) => `$${n}`);
    expect(statement.text).toBe('UPDATE "app"."accounts" SET "balance" = $1, "note" = $2, "fence" = $3 WHERE "id" = $4 AND "fence" < $3');
    expect(statement.values).toEqual([900, 'x', 18446744073709551n, 7]);
    expect(fencedUpdateStatement({ table: 't', id: 'a', set: { v: 1 }, fencingToken: '5', idColumn: 'key', fenceColumn: 'epoch' }, () => '?').text).toBe(
      'UPDATE "t" SET "v" = ?, "epoch" = ? WHERE "key" = ? AND "epoch" < ?',
    );
  });

  it.each([
    [{ table: 't; DROP TABLE x', id: 1, set: { v: 1 }, fencingToken: '1' }, /table/],
    [{ table: 'a.b.c', id: 1, set: { v: 1 }, fencingToken: '1' }, /table/],
    [{ table: 't', id: 1, set: { 'v"': 1 }, fencingToken: '1' }, /set column/],
    [{ table: 't', id: 1, set: {}, fencingToken: '1' }, /at least one column/],
    [{ table: 't', id: 1, set: { fence: 1 }, fencingToken: '1' }, /fence column/],
    [{ table: 't', id: 1, set: { v: 1 }, fencingToken: '1e3' }, /fencingToken/],
    [{ table: 't', id: 1, set: { v: 1 }, fencingToken: 'abc' }, /fencingToken/],
  ])('refuses %o', (update, reason) => {
    expect(() => fencedUpdateStatement(update, () => '?')).toThrow(reason);
  });
});

describe('fencingHeaders', () => {
  const claim = { scope: 's', key: 'k', fingerprint: 'f', leaseToken: 't', leaseExpiresAt: 1, takeover: false };
  it('carries the claim token as Fencing-Token, and refuses a claim without one', () => {
    expect(fencingHeaders({ ...claim, fencingToken: '42' })).toEqual({ 'fencing-token': '42' });
    expect(() => fencingHeaders(claim)).toThrow(TypeError);
  });
});
