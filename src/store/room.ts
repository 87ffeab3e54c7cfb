/** What `statfs(2)` tells of a file system's room (the fields of Node's `StatsFs` this needs). */
export interface FolderRoom {
  bsize: number;
  blocks: number;
  bavail: number;
  files: number;
  ffree: number;
}

/**
 * Bytes a journal append needs free before it is acknowledged: the lines, and room for the compaction that
 * must later fold them in. The next snapshot is at most the current one plus every journal line (each line
 * holds its record and more), and it is written beside both before they go. Counted in whole blocks, plus
 * one: a file grows by blocks, and the lines may start a block the journal's last one cannot hold.
 */
export function roomNeeded(snapshotBytes: number, journalBytes: number, lineBytes: number, bsize: number) {
  const blocks = (n: number) => Math.ceil(n / bsize) * bsize;
  return blocks(lineBytes) + blocks(snapshotBytes + journalBytes + lineBytes) + bsize;
}

/**
 * Why an append of `lineBytes` would not fit in the folder (see `roomNeeded`), or undefined when it would.
 * A file system that states no size (a tmpfs without `size=` reports 0 blocks) sets no limit here; neither
 * does one without inode counts. The next snapshot needs one inode for its temporary file.
 */
export function roomShortfall(
  room: FolderRoom,
  snapshotBytes: number,
  journalBytes: number,
  lineBytes: number,
): string | undefined {
  if (room.files > 0 && room.ffree < 1) return 'no free inode for the next snapshot';
  if (room.blocks === 0 || room.bsize <= 0) return undefined;
  const needed = roomNeeded(snapshotBytes, journalBytes, lineBytes, room.bsize);
  const free = room.bavail * room.bsize;
  return free < needed
    ? `${free} bytes free, a change needs ${needed} (its line and room to fold the journal into a snapshot)`
    : undefined;
}
