// The closing line of scripts/test-all.sh: "tests: N passed, N failed" over vitest JSON reports.
// Each failing test counts once. A file that failed with no failing test in it (it did not load, a hook
// failed) counts once; so does a report that is missing (its run crashed before writing it), and a run that
// failed with nothing failed in it (its global setup threw: the report says `success: false` and holds no test).
import { existsSync, readFileSync } from 'node:fs';

export function countResults(reports) {
  let passed = 0;
  let failed = 0;
  const failures = [];
  for (const { name, report } of reports) {
    if (!report) {
      failed++;
      failures.push(`${name}: no report (the run did not finish)`);
      continue;
    }
    passed += report.numPassedTests;
    const before = failed;
    for (const file of report.testResults ?? []) {
      const tests = (file.assertionResults ?? []).filter((t) => t.status === 'failed');
      for (const t of tests) failures.push(`${name}: ${t.fullName}`);
      failed += tests.length;
      if (file.status === 'failed' && tests.length === 0) {
        failed++;
        failures.push(`${name}: ${file.name}: ${(file.message ?? 'failed').split('\n')[0]}`);
      }
    }
    if (report.success === false && failed === before) {
      failed++;
      failures.push(`${name}: the run failed outside any test (its global setup, or an unhandled error)`);
    }
  }
  return { passed, failed, failures };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const reports = process.argv.slice(2).map((path) => ({
    name: path.replace(/^.*\//, '').replace(/\.json$/, ''),
    report: existsSync(path) ? JSON.parse(readFileSync(path, 'utf8')) : undefined,
  }));
  const { passed, failed, failures } = countResults(reports);
  for (const f of failures) console.log(`failed: ${f}`);
  console.log(`tests: ${passed} passed, ${failed} failed`);
}
