import { edgeText } from '../haproxy/edge.js';
import { endpointKey } from '../routes/endpoint.js';
import { bindText, type FieldChange, type Operation, type Plan } from './plan.js';

/** A plan as text for dry runs and logs: one line per change, `+` create, `~` update, `-` delete. */
export function formatPlan(p: Plan): string {
  const lines = p.operations.flatMap(formatOperation);
  for (const c of p.conflicts) lines.push(`! ${c.kind} ${c.name}: ${c.detail}`);
  return lines.length === 0 ? 'no changes' : lines.join('\n');
}

function changesText(changes: readonly FieldChange[]): string {
  return changes.map((c) => `${c.field} ${c.from} -> ${c.to}`).join(', ');
}

function formatOperation(op: Operation): string[] {
  switch (op.kind) {
    case 'create_frontend':
      return [
        `+ frontend ${op.frontend.name} bind ${bindText(op.frontend.bind)} inspect-delay ${op.frontend.inspectDelayMs}ms` +
          ` default_backend ${op.frontend.defaultBackend ?? 'none'} sni_map ${op.frontend.sniMap}` +
          ` guard ${edgeText(op.frontend.edge)}`,
      ];
    case 'update_frontend':
      return [`~ frontend ${op.frontend.name}: ${changesText(op.changes)}`];
    case 'delete_frontend':
      return [`- frontend ${op.name}`];
    case 'create_backend':
      return [
        op.backend.table
          ? `+ backend ${op.backend.name} (table) stick-table ${op.backend.table}`
          : `+ backend ${op.backend.name} (slot) balance ${op.backend.balance}`,
      ];
    case 'update_backend':
      return [`~ backend ${op.backend.name}: ${changesText(op.changes)}`];
    case 'delete_backend':
      return [`- backend ${op.name}`];
    case 'create_server':
      return [
        `+ server ${op.backend}/${op.server.name} ${endpointKey(op.server)}${op.server.check ? ' check' : ''}`,
      ];
    case 'update_server':
      return [`~ server ${op.backend}/${op.server.name}: ${changesText(op.changes)}`];
    case 'delete_server':
      return [`- server ${op.backend}/${op.server.name} ${endpointKey(op.server)}`];
    case 'set_map_entry':
      return [
        op.previous === null
          ? `+ map ${op.map}: ${op.host} -> ${op.backend} (cluster ${op.cluster})`
          : `~ map ${op.map}: ${op.host} -> ${op.backend} (was ${op.previous}, cluster ${op.cluster})`,
      ];
    case 'delete_map_entry':
      return [`- map ${op.map}: ${op.host} -> ${op.backend}`];
    case 'add_allow_entry':
      return [`+ allow ${op.map}: ${op.key} (${op.stage})`];
    case 'delete_allow_entry':
      return [`- allow ${op.map}: ${op.key} (${op.stage})`];
    case 'set_switching_rules':
      return [
        ...op.removed.map(
          (r) => `- rule ${op.frontend}: use_backend ${r.backend} if { req.ssl_sni -i ${r.host} }`,
        ),
        ...op.added.map(
          (r) => `+ rule ${op.frontend}: use_backend ${r.backend} if { req.ssl_sni -i ${r.host} }`,
        ),
        ...(op.added.length === 0 && op.removed.length === 0 ? [`~ rules ${op.frontend}: reordered`] : []),
      ];
  }
}
