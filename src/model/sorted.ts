/**
 * The first index of `items` (sorted) whose item is not before the one sought (`isBefore` true for the items
 * that come first): where it is, or where it goes. A binary search, a leaf module.
 */
export function lowerBound<T>(items: readonly T[], isBefore: (item: T) => boolean): number {
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (isBefore(items[mid] as T)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
