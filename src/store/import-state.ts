import type { ClusterRecord } from '../model/cluster.js';
import { ClusterStore } from './cluster-store.js';
import type { DesiredStore } from './desired-store.js';

/** A store that can take a record as it is (its claimedAt and updatedAt), as `KubeClusterStore` can. */
export interface RecordImporter {
  /** Creates the cluster from the record unless the store holds it (or a tombstone of it); says whether. */
  importRecord(record: ClusterRecord): Promise<boolean>;
}

/**
 * One-shot move of a state file (ClusterStore's snapshot and journal) into another store: clusters the store
 * already holds are left as they are. With `importRecord` each cluster keeps its claimedAt, so the older
 * claim still wins a contested host; a store without it gets plain upserts (claims dated now).
 */
export async function importStateFile(
  path: string,
  store: DesiredStore & Partial<RecordImporter>,
): Promise<{ imported: number; skipped: number }> {
  const records = await ClusterStore.read(path);
  let imported = 0;
  for (const record of records) {
    let created: boolean;
    if (store.importRecord) created = await store.importRecord(record);
    else if (store.get(record.name)) created = false;
    else {
      const { name, host, target, authorizedNetworks } = record;
      await store.upsert({ name, host, target, ...(authorizedNetworks ? { authorizedNetworks } : {}) });
      created = true;
    }
    if (created) imported++;
  }
  return { imported, skipped: records.length - imported };
}
