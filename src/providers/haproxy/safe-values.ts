/** What may reach HAProxy's files and runtime commands unquoted: shared by the owned file and the map file. */
export const HOST = /^[A-Za-z0-9.-]{1,253}$/;

export class UnsafeValueError extends Error {
  override readonly name = 'UnsafeValueError';
}
