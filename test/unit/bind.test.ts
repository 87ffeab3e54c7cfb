import { describe, expect, it } from 'vitest';
import { parseBindAddr } from '../../src/config/bind.js';

describe('parseBindAddr', () => {
  it.each([
    [':443', { address: '*', port: 443 }],
    ['*:443', { address: '*', port: 443 }],
    ['0.0.0.0:443', { address: '0.0.0.0', port: 443 }],
    ['127.0.0.1:8443', { address: '127.0.0.1', port: 8443 }],
    ['[::]:443', { address: '::', port: 443 }],
    ['[::1]:8443', { address: '::1', port: 8443 }],
  ])('parses %s', (raw, bind) => {
    expect(parseBindAddr(raw)).toEqual({ ok: true, bind });
  });

  it.each([
    '443',
    ':0',
    ':65536',
    'example.com:443',
    '10.0.0.1:443 ssl crt /x',
    '[zz]:443',
    '::1:443',
    '999.1.1.1:443',
  ])('rejects %j', (raw) => {
    expect(parseBindAddr(raw).ok).toBe(false);
  });
});
