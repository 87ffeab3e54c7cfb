import type { RawState } from '../../haproxy/model.js';
import { type DataplaneClient, versionOf } from './client.js';
import { readConfigText } from './config-text.js';
import type { Counter } from './reload.js';

/** The configuration file as the API holds it at one version, and what it reads as. */
export interface ConfigRead {
  readonly version: number;
  readonly text: string;
  /** The frontends and backends the text holds (parsed when first asked). */
  state(): RawState;
}

/**
 * Reads of the configuration, as text (`GET /configuration/raw`: the file as it is, a few ms at 5000 routes,
 * where the API's structured lists cost it a second), kept while its version has not moved. A write of ours
 * says the version and text it left, so that the next read needs no request but the version's.
 */
export class ConfigReads {
  private held: ConfigRead | undefined;

  constructor(
    private readonly client: DataplaneClient,
    /** The logical name of an SNI map, from the path a frontend's map rule names. */
    private readonly mapName: (file: string) => string,
    /** The owner's allow map (`readEdge`, and each slot's guard). */
    private readonly allowMap: string,
  ) {}

  async version(signal: AbortSignal, counter: Counter): Promise<number> {
    counter.requests++;
    const { data } = await this.client.GET('/services/haproxy/configuration/version', { signal });
    return data;
  }

  /** The configuration as of now: what is held while the version has not moved, else read again. */
  async read(signal: AbortSignal, counter: Counter): Promise<ConfigRead> {
    const version = await this.version(signal, counter);
    if (this.held?.version === version) return this.held;
    counter.requests++;
    const res = await this.client.GET('/services/haproxy/configuration/raw', { signal, text: true });
    const read = this.made(versionOf(res.headers) ?? version, String(res.data ?? ''));
    this.held = read;
    return read;
  }

  /** A write of ours left the file at `version`, holding `text`. */
  wrote(version: number | undefined, text: string): void {
    this.held = version === undefined ? undefined : this.made(version, text);
  }

  /** What was held no longer tells what is there. */
  forget(): void {
    this.held = undefined;
  }

  get current(): ConfigRead | undefined {
    return this.held;
  }

  private made(version: number, text: string): ConfigRead {
    let state: RawState | undefined;
    return { version, text, state: () => (state ??= readConfigText(text, this.mapName, this.allowMap)) };
  }
}
