import pino from 'pino';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { describeProvider } from '../contract/provider-contract.js';
import { haproxyVersionUnderTest, startHaproxyTestbed } from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';

// The provider contract against a real HAProxy: every random plan is a real `haproxy -c` and reload (or
// runtime commands), next to a foreign frontend and backend in the operator's own file. The operator's
// `defaults` is HTTP on purpose: the owned sections must not inherit it.
export function operatorConfig(consolePort: number, backendPort: number): string {
  return `global
  stats socket /etc/kubebyon/admin.sock mode 600 level admin
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend console_https
  mode tcp
  bind 127.0.0.1:${consolePort}
  default_backend console
backend console
  mode tcp
  server web1 127.0.0.1:${backendPort}
`;
}

const version = haproxyVersionUnderTest();

describeProvider(
  `haproxy ${version}`,
  async () => {
    const haproxy = await startHaproxyTestbed(
      operatorConfig(await freeLoopbackPort(), await freeLoopbackPort()),
      version,
      { ownedFile: true },
    );
    const owned = haproxy.owned;
    if (!owned) throw new Error('the test bed has no owned file');
    const provider = new StockHaproxyProvider(
      {
        kind: 'haproxy',
        ownedFile: owned.path,
        checkFiles: owned.checkFiles,
        masterSocket: owned.masterSocket,
        haproxyBin: owned.checkBin,
        reloadTimeoutMs: 30_000,
      },
      { logger: pino({ level: 'silent' }) },
    );
    return {
      provider,
      render: {
        ...DEFAULT_RENDER_OPTIONS,
        bind: { address: '127.0.0.1', port: await freeLoopbackPort() },
        defaultBackend: 'console',
      },
      reset: () => owned.reloadWith(''),
      cleanup: () => haproxy.stop(),
    };
  },
  { runs: 15, timeoutMs: 15_000 },
);
