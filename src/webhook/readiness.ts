/** What /readyz answers: ready when every check is ok; each check may say why it is not. */
export interface Readiness {
  ready: boolean;
  checks: Record<string, { ok: boolean; detail?: string }>;
}
