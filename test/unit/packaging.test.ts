import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAllYaml } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';

// What ships must agree with itself: the package's bin, the image the build script makes, compose.yaml and
// the Kubernetes Deployment all name the same program, image, user and state folder.
const root = join(import.meta.dirname, '../..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');
const pkg = JSON.parse(read('package.json'));
const dockerfile = read('docker/adapter/Dockerfile');
// biome-ignore lint/suspicious/noExplicitAny: manifests are read as plain YAML documents
const yaml = (path: string): any[] => loadAllYaml(read(path));
const image = `kubebyon/haproxy-adapter:${pkg.version}`;

describe('packaging', () => {
  it('installs the CLI as a bin whose source starts with a node shebang', () => {
    expect(pkg.bin).toEqual({ 'kubebyon-haproxy-adapter': 'dist/cli/main.js' });
    expect(read('src/cli/main.ts').split('\n')[0]).toBe('#!/usr/bin/env node');
  });

  it('builds an image that runs the CLI as a non-root user, with the state folder as a volume', () => {
    expect(read('scripts/build-adapter-image.sh')).toMatch(
      /^tag=\$\{KUBEBYON_ADAPTER_IMAGE:-kubebyon\/haproxy-adapter:\$version\}$/m,
    );
    expect(dockerfile).toMatch(/^FROM scratch$/m);
    expect(dockerfile).toMatch(/^ENTRYPOINT \["\/usr\/bin\/node", "\/app\/dist\/cli\/main\.js"\]$/m);
    expect(dockerfile).toMatch(/^CMD \["serve"\]$/m);
    expect(dockerfile).toMatch(/^USER 10001:10001$/m);
    expect(dockerfile).toMatch(/^VOLUME \["\/var\/lib\/kubebyon-haproxy-adapter"\]$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK .*\n\s+CMD \["\/usr\/bin\/node", "\/app\/healthcheck\.mjs"\]$/m);
  });

  it('runs that image with serve in compose.yaml and in the Deployment, as the same user', () => {
    const compose = yaml('compose.yaml')[0];
    expect(compose.services.adapter.image).toBe(`\${KUBEBYON_ADAPTER_IMAGE:-${image}}`);
    expect(compose.services.adapter.command).toEqual(['serve']);
    const deployment = yaml('deploy/kubernetes/deployment.yaml').find((o) => o.kind === 'Deployment');
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];
    expect(container.image).toBe(image);
    expect(container.command).toBeUndefined();
    expect(container.args).toEqual(['serve']);
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001, runAsGroup: 10001 });
    const state = container.env.find((e: { name: string }) => e.name === 'KUBEBYON_STATE_FILE').value;
    expect(container.volumeMounts).toContainEqual(
      expect.objectContaining({ name: 'state', mountPath: state.slice(0, state.lastIndexOf('/')) }),
    );
  });
});
