import type { SlotAllowIndex } from '../../haproxy/allow-file.js';
import { slotOfKey } from '../../haproxy/allow-keys.js';
import type { HaproxyState } from '../../haproxy/model.js';
import { type SlotMapOp, slotAllowMapName } from '../../haproxy/slot-allow.js';
import { isAllowOperation } from '../../plan/operations.js';
import type { Change } from '../provider.js';
import type { RuntimeOp } from '../runtime-steps.js';

/**
 * A list change in the Data Plane API's terms (authorized networks, `src/haproxy/slot-allow.ts`): the
 * changes of the slots' own maps each logical allow operation makes at runtime, and the maps a change's
 * files then need. `allow` keeps the logical keys by slot; it is moved on here, never changed elsewhere.
 */

const entriesOf = (state: HaproxyState, map: string) => state.maps?.find((m) => m.name === map)?.entries;

/** Each allow operation of `steps`, with the changes of its slot's map, from the change's starting state. */
export function slotStepsOf(
  allow: SlotAllowIndex,
  steps: readonly RuntimeOp[],
  change: Change,
): Map<RuntimeOp, SlotMapOp[]> {
  const out = new Map<RuntimeOp, SlotMapOp[]>();
  const byMap = new Map<
    string,
    Array<Extract<RuntimeOp, { kind: 'add_allow_entry' | 'delete_allow_entry' }>>
  >();
  for (const op of steps) {
    if (!isAllowOperation(op)) continue;
    const ops = byMap.get(op.map);
    if (ops) ops.push(op);
    else byMap.set(op.map, [op]);
  }
  for (const [map, ops] of byMap) {
    allow.follow(entriesOf(change.from.state, map) ?? new Map());
    const each = allow.runtimeSteps(map, ops);
    ops.forEach((op, i) => {
      out.set(op, each[i] ?? []);
    });
  }
  return out;
}

/**
 * The maps of the slots a list change touched, with their text once the change is made (`allow` moved on
 * to the change's target, told which keys changed).
 */
export function touchedSlotMaps(
  allow: SlotAllowIndex,
  change: Change,
  ops: ReadonlyArray<{ map: string; key: string }>,
): Array<[string, string]> {
  const keysByMap = new Map<string, string[]>();
  for (const o of ops) {
    const keys = keysByMap.get(o.map);
    if (keys) keys.push(o.key);
    else keysByMap.set(o.map, [o.key]);
  }
  const out: Array<[string, string]> = [];
  for (const [name, keys] of keysByMap) {
    const from = entriesOf(change.from.state, name);
    allow.follow(entriesOf(change.to.state, name) ?? new Map(), from ? { from, keys } : undefined);
    for (const slot of new Set(keys.map(slotOfKey)))
      out.push([slotAllowMapName(name, slot), allow.text(slot)]);
  }
  return out;
}
