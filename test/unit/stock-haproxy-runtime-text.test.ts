import { describe, expect, it } from 'vitest';
import { alertsIn } from '../../src/haproxy/alerts.js';
import {
  parseReloadAnswer,
  parseServersState,
  parseShowBackend,
  parseShowProc,
  parseShowStat,
  RuntimeAnswerError,
  reloadProgress,
} from '../../src/providers/haproxy/runtime-text.js';

// Answers as HAProxy 3.0.11 and 2.6.12 (the test bed's) gave them.
describe('master CLI answers', () => {
  it('reads the backend names of show backend (3.0 and 2.6 answer alike), without internal ones', () => {
    expect(parseShowBackend('# name\nconsole\nkubebyon_a_0123456789ab\n<HTTPCLIENT>\n\n')).toEqual([
      'console',
      'kubebyon_a_0123456789ab',
    ]);
    expect(parseShowBackend('# name\n\n')).toEqual([]);
    expect(() => parseShowBackend('Unknown command.\n')).toThrow(/show backend/);
  });

  it('reads show proc on 3.0 and 2.6, after a failed reload too', () => {
    const v30 = `#<PID>          <type>          <reloads>       <uptime>        <version>
1               master          2 [failed: 1]   0d00h00m37s     3.0.11-1+deb13u5
# workers
13              worker          1               0d00h00m04s     3.0.11-1+deb13u5
# programs
`;
    expect(parseShowProc(v30)).toEqual({
      reloads: 2,
      failed: 1,
      workers: [13],
      version: '3.0.11-1+deb13u5',
      uptimeSeconds: 37,
    });
    const v26 = `#<PID>          <type>          <reloads>       <uptime>        <version>
1               master          1 [failed: 0]   0d00h02m01s     2.6.12-1+deb12u4
# workers
15              worker          0               0d00h00m01s     2.6.12-1+deb12u4
9               worker          1               0d00h02m01s     2.6.12-1+deb12u4
# programs
`;
    expect(parseShowProc(v26)).toEqual({
      reloads: 1,
      failed: 0,
      workers: [15, 9],
      version: '2.6.12-1+deb12u4',
      uptimeSeconds: 121,
    });
    expect(() => parseShowProc('')).toThrow(RuntimeAnswerError);
  });

  it('tells a reload from a restart of HAProxy meanwhile, whose reload count starts again', () => {
    const proc = (reloads: number, uptime: string) =>
      parseShowProc(`#<PID> <type> <reloads> <uptime> <version>
1               master          ${reloads} [failed: 0]   ${uptime}     2.6.12-1+deb12u4
`);
    const before = proc(7, '1d02h03m04s');
    expect(before.uptimeSeconds).toBe(((24 + 2) * 60 + 3) * 60 + 4);
    expect(reloadProgress(before, proc(7, '1d02h03m09s'))).toBe('pending');
    expect(reloadProgress(before, proc(8, '1d02h03m09s'))).toBe('reloaded');
    // The container restarted: the master is young and has done no reload, or fewer than before.
    expect(reloadProgress(before, proc(0, '0d00h00m01s'))).toBe('restarted');
    expect(reloadProgress(proc(2, '0d00h00m00s'), proc(0, '0d00h00m00s'))).toBe('restarted');
  });

  it("reads 3.0's reload status with HAProxy's own alert, and 2.6's silence", () => {
    const failed = `Success=0
--
[NOTICE]   (1) : haproxy version is 3.0.11-1+deb13u5
[ALERT]    (1) : Binding [/etc/kubebyon/kubebyon.cfg:5] for frontend kubebyon_sni: protocol tcpv4: cannot bind socket (Address already in use) for [127.0.0.1:19006].
[ALERT]    (1) : [/usr/sbin/haproxy.main()] Some protocols failed to start their listeners! Exiting.
[WARNING]  (1) : Loading failure!
`;
    const answer = parseReloadAnswer(failed);
    expect(answer.status).toBe('failed');
    expect(answer.alerts[0]).toMatch(/^Binding .*cannot bind socket \(Address already in use\)/);
    expect(parseReloadAnswer('Success=1\n--\n[NOTICE]   (1) : Loading success.\n').status).toBe('ok');
    expect(parseReloadAnswer('')).toEqual({ status: 'unknown', alerts: [] });
    expect(alertsIn('[WARNING]  (1) : x\n')).toEqual([]);
  });

  it('reads servers with the address, port and check state HAProxy runs now', () => {
    const text = `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 foreign_be 1 s1 127.0.0.1 2 0 1 1 6 1 0 2 0 0 0 0 - 19002 - 0 0 - - 0
5 kubebyon_a_123 1 srv1 127.0.0.1 0 0 1 1 24 8 2 0 6 0 0 0 - 19004 - 0 0 - - 0
5 kubebyon_a_123 2 srv2 ::1 2 0 1 1 24 1 0 2 0 0 0 0 - 19007 - 0 0 - - 0

`;
    expect(parseServersState(text)).toEqual([
      { backend: 'foreign_be', name: 's1', address: '127.0.0.1', port: 19002, check: false },
      { backend: 'kubebyon_a_123', name: 'srv1', address: '127.0.0.1', port: 19004, check: true },
      { backend: 'kubebyon_a_123', name: 'srv2', address: '::1', port: 19007, check: false },
    ]);
    expect(() => parseServersState('Unknown command\n')).toThrow(RuntimeAnswerError);
  });

  it('reads frontends and backends with their ids and algorithms from show stat', () => {
    const text = `# pxname,svname,qcur,iid,type,algo,
foreign_fe,FRONTEND,,2,0,,
foreign_be,s1,0,3,2,,
foreign_be,BACKEND,0,3,1,roundrobin,
kubebyon_sni,FRONTEND,,1234567890,0,,
<HTTPCLIENT>,BACKEND,0,4,1,roundrobin,

`;
    expect(parseShowStat(text)).toEqual([
      { name: 'foreign_fe', kind: 'frontend', id: 2, algo: '' },
      { name: 'foreign_be', kind: 'backend', id: 3, algo: 'roundrobin' },
      { name: 'kubebyon_sni', kind: 'frontend', id: 1234567890, algo: '' },
    ]);
  });
});
