import { describe, expect, it } from 'vitest';
import { alertsIn, haproxyMessage } from '../../src/haproxy/alerts.js';

// A failed reload as the master CLI answers it (real newlines) and as the Data Plane API reports it
// (escaped newlines inside its message), with HAProxy's own timestamps before the mark.
const log = [
  '[NOTICE]   (1) : haproxy version is 3.0.11',
  '[ALERT]    (1) : Binding [/etc/haproxy/kubebyon.cfg:5] for frontend kubebyon_sni: cannot bind socket',
  'Dec 03 10:00:00 [ALERT]    (7) : Some protocols failed to start their listeners! Exiting.',
  '[ALERT]    (1) :   ',
  '[WARNING]  (1) : Loading failure!',
];

describe('HAProxy alert lines', () => {
  it('are read alike from a log and from an API message, without their prefix', () => {
    const want = [
      'Binding [/etc/haproxy/kubebyon.cfg:5] for frontend kubebyon_sni: cannot bind socket',
      'Some protocols failed to start their listeners! Exiting.',
    ];
    expect(alertsIn(log.join('\n'))).toEqual(want);
    expect(alertsIn(log.join('\\n'))).toEqual(want);
    expect(alertsIn('[WARNING]  (1) : x\n')).toEqual([]);
  });

  it('make the message of an error, else HAProxy’s last lines', () => {
    expect(haproxyMessage(log.join('\n'))).toBe(
      'Binding [/etc/haproxy/kubebyon.cfg:5] for frontend kubebyon_sni: cannot bind socket; Some protocols failed to start their listeners! Exiting.',
    );
    expect(haproxyMessage('a\n\nb\nc\nd\n')).toBe('b; c; d');
    expect(haproxyMessage(`[ALERT] (1) : ${'x'.repeat(5000)}`)).toHaveLength(2000);
  });
});
