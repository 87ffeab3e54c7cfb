import { describe, expect, it } from 'vitest';
import type { RawState } from '../../src/haproxy/model.js';
import { ConcurrentChangeError, TerminalError } from '../../src/model/errors.js';
import type { Operation } from '../../src/plan/plan.js';
import type { TagStore } from '../../src/providers/dataplaneapi/capability.js';
import {
  editConfigText,
  RawEditUnsupported,
  textVersion,
} from '../../src/providers/dataplaneapi/raw-text.js';
import { ownerTags, registry } from '../support/owner.js';

// A file as Data Plane API v3.4.0 stores it (seen on a real API): its head, foreign sections, and the
// service's objects with their metadata as a JSON comment on the line.
const OWN = '# {"owner":{"value":"kubebyon-haproxy-adapter"}}';
const FILE = `# _md5hash=883027db668dcb425b3a378c78b78163
# _version=7
# Dataplaneapi managed File
# changing file directly can cause a conflict if dataplaneapi is running

global
  stats socket /etc/kubebyon/admin.sock mode 600 level admin expose-fd listeners

defaults base
  mode tcp
  timeout connect 5s

frontend console from base
  mode http
  bind 127.0.0.1:18999
  http-request return status 200 content-type text/plain string "console\\n"

frontend kubebyon_sni ${OWN}
  mode tcp
  bind 127.0.0.1:18998 name kubebyon ${OWN}
  tcp-request inspect-delay 5s ${OWN}
  tcp-request content accept if { req.ssl_hello_type 1 } ${OWN}
  use_backend kubebyon_one_7692c3ad3540 if { req.ssl_sni -i one.example.com } ${OWN}
  default_backend console_tls

backend console_tls from base
  mode tcp
  balance roundrobin
  server web1 127.0.0.1:9

backend kubebyon_one_7692c3ad3540 # {"cluster":{"value":"one"},"owner":{"value":"kubebyon-haproxy-adapter"}}
  mode tcp
  balance leastconn
  server srv1 127.0.0.2:20001 check ${OWN}
  server srv2 [::1]:20002 check ${OWN}
`;

// What a read of FILE gives: the state the plans below are made from.
const console_ = {
  name: 'console',
  bind: { address: '127.0.0.1', port: 18999 },
  inspectDelayMs: null,
  acceptsTlsHello: false,
  defaultBackend: null,
  rules: [],
  tags: {},
};
const consoleTls = {
  name: 'console_tls',
  balance: 'roundrobin',
  servers: [{ name: 'web1', address: '127.0.0.1', port: 9, check: false, tags: {} }],
  tags: {},
};
const BEFORE: RawState = {
  frontends: [
    console_,
    {
      name: 'kubebyon_sni',
      bind: { address: '127.0.0.1', port: 18998 },
      inspectDelayMs: 5000,
      acceptsTlsHello: true,
      defaultBackend: 'console_tls',
      rules: [{ backend: 'kubebyon_one_7692c3ad3540', host: 'one.example.com', tags: ownerTags() }],
      tags: ownerTags(),
    },
  ],
  backends: [
    consoleTls,
    {
      name: 'kubebyon_one_7692c3ad3540',
      balance: 'leastconn',
      servers: [
        { name: 'srv1', address: '127.0.0.2', port: 20001, check: true, tags: ownerTags() },
        { name: 'srv2', address: '::1', port: 20002, check: true, tags: ownerTags() },
      ],
      tags: ownerTags('one'),
    },
  ],
};
const METADATA: TagStore = { ownership: 'metadata', serverTags: true };
const edit = (text: string, operations: Operation[], before: RawState = BEFORE) =>
  editConfigText(text, before, operations, registry, METADATA);

const foreignLines = (text: string) => {
  const out: string[] = [];
  let foreign = false;
  // The API writes its own head lines again on every push: they are not sent.
  for (const line of text.slice(text.indexOf('global')).split('\n')) {
    if (/^\S/.test(line)) foreign = !line.includes('kubebyon-haproxy-adapter');
    if (foreign) out.push(line);
  }
  return out.join('\n');
};

/** `text` without the frontend of its own and what follows it, a foreign backend in their place. */
const withoutSni = (text: string) =>
  `${text.slice(0, text.indexOf('frontend kubebyon_sni'))}backend console_tls from base\n  mode tcp\n`;
/** The planner's operation that creates the SNI frontend on *:443. */
const createSni = (defaultBackend: string | null): Operation => ({
  kind: 'create_frontend',
  frontend: { name: 'kubebyon_sni', bind: { address: '*', port: 443 }, inspectDelayMs: 5000, defaultBackend },
});

const newCluster: Operation[] = [
  {
    kind: 'create_backend',
    backend: { name: 'kubebyon_two_0123456789ab', cluster: 'two', balance: 'leastconn' },
  },
  {
    kind: 'create_server',
    backend: 'kubebyon_two_0123456789ab',
    server: { name: 'srv1', address: '127.0.0.3', port: 20003, check: false, owned: true },
  },
  {
    kind: 'set_switching_rules',
    frontend: 'kubebyon_sni',
    rules: [
      { backend: 'kubebyon_one_7692c3ad3540', host: 'one.example.com', owned: true },
      { backend: 'kubebyon_two_0123456789ab', host: 'two.example.com', owned: true },
    ],
    added: [{ backend: 'kubebyon_two_0123456789ab', host: 'two.example.com', owned: true }],
    removed: [],
  },
];

describe('editConfigText', () => {
  it('adds a cluster in the API form and sends every foreign line back byte for byte', () => {
    const out = edit(FILE, newCluster);
    expect(foreignLines(out)).toBe(foreignLines(FILE));
    expect(out).not.toContain('# _version=');
    expect(out).toContain(
      `backend kubebyon_two_0123456789ab # {"cluster":{"value":"two"},"owner":{"value":"kubebyon-haproxy-adapter"}}\n  mode tcp\n  balance leastconn\n  server srv1 127.0.0.3:20003 ${OWN}\n`,
    );
    // The rules keep their place in the frontend: before default_backend.
    expect(out).toContain(
      `  use_backend kubebyon_one_7692c3ad3540 if { req.ssl_sni -i one.example.com } ${OWN}\n  use_backend kubebyon_two_0123456789ab if { req.ssl_sni -i two.example.com } ${OWN}\n  default_backend console_tls\n`,
    );
  });

  it('moves a server by changing its address only, keeping the rest of its line', () => {
    const out = edit(FILE, [
      {
        kind: 'update_server',
        backend: 'kubebyon_one_7692c3ad3540',
        server: { name: 'srv2', address: '::2', port: 20009, check: true, owned: true },
        changes: [],
      },
    ]);
    expect(out).toContain(`  server srv2 [::2]:20009 check ${OWN}\n`);
    expect(out).toContain(`  server srv1 127.0.0.2:20001 check ${OWN}\n`);
    expect(foreignLines(out)).toBe(foreignLines(FILE));
  });

  it('creates the frontend as the API writes it, and deletes sections of its own', () => {
    const out = edit(
      withoutSni(FILE),
      [
        createSni('console_tls'),
        ...newCluster.slice(0, 2),
        {
          ...(newCluster[2] as Extract<Operation, { kind: 'set_switching_rules' }>),
          rules: [{ backend: 'kubebyon_two_0123456789ab', host: 'two.example.com', owned: true }],
        },
      ],
      { frontends: [console_], backends: [consoleTls] },
    );
    expect(out).toContain(
      [
        `frontend kubebyon_sni ${OWN}`,
        '  mode tcp',
        `  bind *:443 name kubebyon ${OWN}`,
        // Never tagged: v3.2.15 doubles a comment on this line at every write of the file.
        '  tcp-request inspect-delay 5000ms',
        `  tcp-request content accept if { req.ssl_hello_type 1 } ${OWN}`,
        `  use_backend kubebyon_two_0123456789ab if { req.ssl_sni -i two.example.com } ${OWN}`,
        '  default_backend console_tls',
      ].join('\n'),
    );
    const gone = edit(FILE, [
      { kind: 'delete_frontend', name: 'kubebyon_sni' },
      { kind: 'delete_backend', name: 'kubebyon_one_7692c3ad3540' },
    ]);
    expect(gone).not.toMatch(/kubebyon_sni|kubebyon_one|kubebyon-haproxy-adapter/);
    expect(foreignLines(gone).trim()).toBe(foreignLines(FILE).trim());
  });

  it('takes the meaning of each operation from applyOperations: a plan from another state is refused', () => {
    // Ownership is the registry's (test/unit/ownership.test.ts); what is left here is existence.
    expect(() => edit(FILE, [{ kind: 'delete_backend', name: 'gone' }])).toThrow(ConcurrentChangeError);
    expect(() =>
      edit(FILE, [
        { kind: 'create_backend', backend: { name: 'console_tls', cluster: 'x', balance: 'leastconn' } },
      ]),
    ).toThrow(ConcurrentChangeError);
    // A section the read had but the text lacks: the text is not what the plan was made from.
    expect(() =>
      edit(FILE.replace(/backend kubebyon_one[\s\S]*$/, ''), [
        { kind: 'delete_backend', name: 'kubebyon_one_7692c3ad3540' },
      ]),
    ).toThrow(RawEditUnsupported);
  });

  it('writes nothing unvalidated: a host or address that could inject configuration is refused', () => {
    const bad = structuredClone(newCluster);
    (bad[2] as Extract<Operation, { kind: 'set_switching_rules' }>).rules[1] = {
      backend: 'kubebyon_two_0123456789ab',
      host: 'two.example.com }\n  use_backend x if TRUE #',
      owned: true,
    };
    expect(() => edit(FILE, bad)).toThrow(TerminalError);
    const badServer = structuredClone(newCluster);
    (badServer[1] as Extract<Operation, { kind: 'create_server' }>).server.address = '127.0.0.3:1 backup';
    expect(() => edit(FILE, badServer)).toThrow(TerminalError);
  });

  it('leaves to a transaction what it cannot do by text', () => {
    const withForeignRule = FILE.replace(
      '  default_backend console_tls',
      '  use_backend console_tls if { req.ssl_sni -i console.example.com }\n  default_backend console_tls',
    );
    expect(() => edit(withForeignRule, newCluster)).toThrow(RawEditUnsupported);
    expect(() =>
      edit(FILE, [
        {
          kind: 'update_frontend',
          frontend: {
            name: 'kubebyon_sni',
            bind: { address: '*', port: 443 },
            inspectDelayMs: 1,
            defaultBackend: null,
          },
          changes: [],
        },
      ]),
    ).toThrow(RawEditUnsupported);
    expect(() =>
      edit(FILE, [
        {
          kind: 'update_server',
          backend: 'kubebyon_one_7692c3ad3540',
          server: { name: 'srv1', address: '127.0.0.2', port: 20001, check: false, owned: true },
          changes: [],
        },
      ]),
    ).toThrow(RawEditUnsupported);
  });

  it('reads the version the API wrote into the head', () => {
    expect(textVersion(FILE)).toBe(7);
    expect(textVersion('global\n')).toBeUndefined();
  });
});

// The same configuration as Data Plane API v3.0.23 stores it (seen on a real API): tags of frontends and
// backends in a `description` line first in the section, servers' in a metadata comment, none on the rest.
const DESCRIBED = FILE.replace(/ # \{"owner":\{"value":"kubebyon-haproxy-adapter"\}\}/g, '')
  .replace(
    'frontend kubebyon_sni\n',
    'frontend kubebyon_sni\n  description kubebyon owner=kubebyon-haproxy-adapter\n',
  )
  .replace(
    /backend kubebyon_one_7692c3ad3540 # .*\n/,
    'backend kubebyon_one_7692c3ad3540\n  description kubebyon owner=kubebyon-haproxy-adapter cluster=one\n',
  )
  .replace(/(server srv\d \S+ check)\n/g, `$1 ${OWN}\n`);

/** The sections another owner holds, text as is: ours name our owner id in their description. */
const foreignSections = (text: string) =>
  text
    .slice(text.indexOf('global'))
    .split(/\n(?=\S)/)
    .filter((s) => !/^\s+description kubebyon owner=kubebyon-haproxy-adapter\b/m.test(s))
    .join('\n');

describe('editConfigText where tags live in descriptions (v3.0)', () => {
  const store: TagStore = { ownership: 'description', serverTags: true };
  const editDescribed = (text: string, operations: Operation[], before: RawState = BEFORE, s = store) =>
    editConfigText(text, before, operations, registry, s);

  it('reads as the fixture says: tags only in descriptions and on servers', () => {
    expect(DESCRIBED).toContain(
      '  use_backend kubebyon_one_7692c3ad3540 if { req.ssl_sni -i one.example.com }\n',
    );
    expect(DESCRIBED).toContain(`  server srv1 127.0.0.2:20001 check ${OWN}\n`);
    expect(DESCRIBED.match(/kubebyon-haproxy-adapter/g)).toHaveLength(4);
  });

  it('adds a cluster with a description line and untagged rules, every foreign line byte for byte', () => {
    const out = editDescribed(DESCRIBED, newCluster);
    expect(foreignSections(out)).toBe(foreignSections(DESCRIBED));
    expect(foreignSections(out)).toContain('backend console_tls from base');
    expect(out).toContain(
      `backend kubebyon_two_0123456789ab\n  description kubebyon owner=kubebyon-haproxy-adapter cluster=two\n  mode tcp\n  balance leastconn\n  server srv1 127.0.0.3:20003 ${OWN}\n`,
    );
    expect(out).toContain(
      '  use_backend kubebyon_one_7692c3ad3540 if { req.ssl_sni -i one.example.com }\n  use_backend kubebyon_two_0123456789ab if { req.ssl_sni -i two.example.com }\n  default_backend console_tls\n',
    );
    // Servers carry no tags where the version has no metadata on servers either.
    const bare = editDescribed(DESCRIBED, newCluster, BEFORE, {
      ownership: 'description',
      serverTags: false,
    });
    expect(bare).toContain('  server srv1 127.0.0.3:20003\n');
  });

  it('creates the frontend with its description first, nothing on its bind and rules', () => {
    const out = editDescribed(withoutSni(DESCRIBED), [createSni(null)], {
      frontends: [console_],
      backends: [consoleTls],
    });
    expect(out).toContain(
      [
        'frontend kubebyon_sni',
        '  description kubebyon owner=kubebyon-haproxy-adapter',
        '  mode tcp',
        '  bind *:443 name kubebyon',
        '  tcp-request inspect-delay 5000ms',
        '  tcp-request content accept if { req.ssl_hello_type 1 }',
      ].join('\n'),
    );
  });

  it('a rule line in its frontend is its backend’s: one to a foreign backend leaves the edit to a transaction', () => {
    const withForeignRule = DESCRIBED.replace(
      '  default_backend console_tls',
      '  use_backend console_tls if { req.ssl_sni -i console.example.com }\n  default_backend console_tls',
    );
    expect(() => editDescribed(withForeignRule, newCluster)).toThrow(RawEditUnsupported);
  });
});
