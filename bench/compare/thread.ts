import { Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * A worker thread running the TypeScript module at `url`. The benches run under tsx, whose loader a worker
 * does not inherit: the thread registers it first, then imports the module.
 */
export function tsWorker(url: URL, options: WorkerOptions = {}): Worker {
  const tsx = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(tsx)}).then((t) => { t.register(); return import(${JSON.stringify(url.href)}); })`;
  return new Worker(code, { ...options, eval: true });
}
