import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAllYaml } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';

// What ships must agree with itself: the package's bin, the image the build script makes, compose.yaml and
// the Helm chart all name the same program, image, user and state folder (the chart's rendering of them is
// checked by test/kubernetes/chart.test.ts).
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

  it('runs that image with serve in compose.yaml, and the chart names it by its version', () => {
    const compose = yaml('compose.yaml')[0];
    expect(compose.services.adapter.image).toBe(`\${KUBEBYON_ADAPTER_IMAGE:-${image}}`);
    expect(compose.services.adapter.command).toEqual(['serve']);
    const chart = yaml('charts/kubebyon-haproxy-adapter/Chart.yaml')[0];
    const values = yaml('charts/kubebyon-haproxy-adapter/values.yaml')[0];
    expect([chart.version, chart.appVersion]).toEqual([pkg.version, pkg.version]);
    expect(`${values.adapter.image.repository}:${values.adapter.image.tag || chart.appVersion}`).toBe(image);
  });
});
