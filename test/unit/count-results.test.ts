import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module of the scripts, without types
import { countResults } from '../../scripts/lib/count-results.mjs';

type Report = Record<string, unknown>;
const file = (name: string, status: string, tests: string[], message = '') => ({
  name,
  status,
  message,
  assertionResults: tests.map((t, i) => ({ fullName: `${name} ${i}`, status: t })),
});
const report = (passed: number, files: unknown[]): Report => ({
  numPassedTests: passed,
  numFailedTests: 99, // never read: counted from the files, once each
  numFailedTestSuites: 99,
  success: false,
  testResults: files,
});

describe('the closing line of scripts/test-all.sh', () => {
  it('counts one failing test once, not again as a failed suite and file', () => {
    const r = countResults([
      {
        name: 'unit',
        report: report(3, [file('a.test.ts', 'failed', ['passed', 'failed', 'passed', 'passed'])]),
      },
    ]);
    expect([r.passed, r.failed]).toEqual([3, 1]);
    expect(r.failures).toEqual(['unit: a.test.ts 1']);
  });

  it('counts a file that failed with no failing test (it did not load) once, and a missing report once', () => {
    const r = countResults([
      {
        name: 'unit',
        report: report(2, [
          file('ok.test.ts', 'passed', ['passed', 'passed']),
          file('broken.test.ts', 'failed', [], 'SyntaxError: x\nat y'),
        ]),
      },
      { name: 'e2e', report: undefined },
    ]);
    expect([r.passed, r.failed]).toEqual([2, 2]);
    expect(r.failures).toEqual([
      'unit: broken.test.ts: SyntaxError: x',
      'e2e: no report (the run did not finish)',
    ]);
  });

  it('counts a run that failed outside any test (its global setup threw) once, and a passing run not at all', () => {
    const r = countResults([
      { name: 'node', report: { numPassedTests: 0, success: false, testResults: [] } },
      {
        name: 'unit',
        report: {
          numPassedTests: 2,
          success: true,
          testResults: [file('a.test.ts', 'passed', ['passed', 'passed'])],
        },
      },
    ]);
    expect([r.passed, r.failed]).toEqual([2, 1]);
    expect(r.failures).toEqual([
      'node: the run failed outside any test (its global setup, or an unhandled error)',
    ]);
  });
});
