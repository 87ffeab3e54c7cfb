/** The HTTP status of a Kubernetes API error (client-node puts it in `code`), if it is one. */
export function statusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown } | null;
  const status = e?.code ?? e?.statusCode;
  return typeof status === 'number' ? status : undefined;
}

/** An API error in one line: its Status message, not the headers and raw body the client's message holds. */
export function describeError(err: unknown): string {
  const status = statusOf(err);
  if (status !== undefined) {
    const body = (err as { body?: unknown }).body;
    let message = '';
    try {
      const parsed = typeof body === 'string' ? JSON.parse(body) : body;
      message = String((parsed as { message?: unknown } | null)?.message ?? '');
    } catch {}
    return `HTTP ${status}${message ? `: ${message}` : ''}`;
  }
  if (err instanceof Error && err.name === 'AbortError') return 'no answer within the time allowed';
  return err instanceof Error ? err.message : String(err);
}
