import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { alertsIn } from '../../haproxy/alerts.js';
import type { RawState } from '../../haproxy/model.js';
import { errorText, ReloadFailedError, TerminalError } from '../../model/errors.js';
import { prepareFileAtomic } from '../../store/atomic-file.js';
import { generationCarrier, generationOf } from './owned-file.js';
import {
  type ProcState,
  parseReloadAnswer,
  parseShowProc,
  parseShowStat,
  reloadProgress,
} from './runtime-text.js';
import { OWNED_FILE_MODE, readCommand, type Session, writeOwnedFile } from './session.js';

const CHECK_OUTPUT_LIMIT = 16 * 1024 * 1024;
const CONFIRM_MS = 10_000;

/**
 * `text` (the owned file for `fileState`) through a reload: written beside the owned file, `haproxy -c`
 * checked with the operator's files, put in place atomically, reloaded through the master, and confirmed by
 * the new worker running its structure. Any failure after the file is in place writes `previous` back.
 */
export async function applyByReload(
  s: Session,
  previous: string,
  fileState: RawState,
  text: string,
  signal: AbortSignal,
): Promise<void> {
  const frontend = generationCarrier(fileState);
  const expected = frontend === null ? null : { frontend, generation: generationOf(fileState) };
  const prepared = await prepareFileAtomic(s.config.ownedFile, text, OWNED_FILE_MODE);
  s.traffic?.bytes('sent', Buffer.byteLength(text));
  let before: ProcState;
  try {
    await check(s, prepared.tmpPath, signal);
    before = parseShowProc(await readCommand(s, 'show proc', signal));
    signal.throwIfAborted();
  } catch (err) {
    await prepared.discard();
    throw err;
  }
  await prepared.commit();
  // Committed: the reload is seen through whatever the caller's signal says, bounded by the reload timeout.
  const started = Date.now();
  try {
    await reloadAndConfirm(s, before, expected);
  } catch (err) {
    await writeOwnedFile(s, previous);
    s.logger.error({ err: errorText(err) }, 'reload failed; the previous owned file is back in place');
    throw err;
  }
  s.logger.info({ ms: Date.now() - started }, 'HAProxy reloaded with the new owned file');
}

/** `haproxy -c` of the operator's files and the candidate, as HAProxy will load them. */
async function check(s: Session, candidate: string, signal: AbortSignal): Promise<void> {
  const { haproxyBin, reloadTimeoutMs, checkFiles, ownedFile } = s.config;
  const args = ['-c', ...checkFiles.flatMap((f) => ['-f', f]), '-f', candidate];
  await new Promise<void>((resolve, reject) => {
    execFile(
      haproxyBin,
      args,
      { signal, timeout: reloadTimeoutMs, maxBuffer: CHECK_OUTPUT_LIMIT },
      (err, stdout, stderr) => {
        if (!err) return resolve();
        if (signal.aborted) return reject(signal.reason);
        if ((err as { killed?: boolean }).killed)
          return reject(new Error(`${haproxyBin} -c did not finish within ${reloadTimeoutMs} ms`));
        const code = (err as NodeJS.ErrnoException).code;
        if (typeof code === 'string')
          return reject(new TerminalError(`cannot run ${haproxyBin} -c: ${err.message}`));
        const output = `${stdout}\n${stderr}`.split(candidate).join(`${ownedFile} (candidate)`);
        const alerts = alertsIn(output);
        reject(
          new TerminalError(
            `HAProxy refuses the new configuration (haproxy -c): ${alerts.length > 0 ? alerts.join('; ') : output.trim().slice(-2000)}`,
          ),
        );
      },
    );
  });
}

/** The owned frontend and the id it has once HAProxy runs the new file (none without a frontend). */
type Expected = { frontend: string; generation: number } | null;

async function reloadAndConfirm(s: Session, before: ProcState, expected: Expected): Promise<void> {
  const { reloadTimeoutMs } = s.config;
  const deadline = Date.now() + reloadTimeoutMs;
  const bounded = AbortSignal.timeout(reloadTimeoutMs);
  // 3.0 answers once the new workers run (or failed); 2.6 closes the connection and answers nothing.
  const answer = parseReloadAnswer(await s.cli.send('reload', bounded, reloadTimeoutMs).catch(() => ''));
  const proc = await reloadCounted(s, before, bounded, deadline);
  const restarted = reloadProgress(before, proc) === 'restarted';
  if (restarted) s.logger.warn('HAProxy restarted during the reload; checking that it runs the new file');
  if (!restarted && (answer.status === 'failed' || proc.failed > before.failed)) {
    const why =
      answer.alerts.length > 0
        ? answer.alerts.join('; ')
        : 'HAProxy does not say why over the master CLI in this version; its own log has the reason';
    throw new ReloadFailedError(`HAProxy refused the new configuration and keeps the previous one: ${why}`);
  }
  if (expected === null) return;
  // The master says the reload worked: its new worker answers within moments, running the new file.
  await runsGeneration(s, expected, bounded, Math.min(deadline, Date.now() + CONFIRM_MS));
}

/**
 * The master's state once it has counted the reload, as done or failed. A restart of HAProxy during the
 * reload (its container restarted) ends the wait too: waiting for the new master's count to pass the old
 * one would take the whole reload timeout.
 */
async function reloadCounted(
  s: Session,
  before: ProcState,
  bounded: AbortSignal,
  deadline: number,
): Promise<ProcState> {
  let proc: ProcState | undefined;
  while (!proc || reloadProgress(before, proc) === 'pending') {
    if (Date.now() > deadline)
      throw new Error(`HAProxy did not report the reload within ${s.config.reloadTimeoutMs} ms`);
    if (proc) await sleep(50);
    proc = await s.cli
      .sendRetrying('show proc', bounded, deadline)
      .then(parseShowProc)
      .catch(() => undefined);
  }
  return proc;
}

/** Waits until the current worker's `frontend` has `generation` as its id: it runs the new owned file. */
async function runsGeneration(
  s: Session,
  { frontend, generation }: NonNullable<Expected>,
  bounded: AbortSignal,
  confirmBy: number,
): Promise<void> {
  for (;;) {
    const running = await s.cli
      .sendRetrying('@1 show stat -1 1 -1', bounded, confirmBy)
      .then(parseShowStat)
      .catch(() => []);
    if (running.find((p) => p.name === frontend)?.id === generation) return;
    if (Date.now() > confirmBy)
      throw new TerminalError(
        `HAProxy reloaded but does not run the owned file: is it started with -f ${s.config.ownedFile} (or a path to the same file)?`,
      );
    await sleep(50);
  }
}
