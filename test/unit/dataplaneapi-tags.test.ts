import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TerminalError } from '../../src/model/errors.js';
import {
  descriptionToTags,
  sectionTags,
  tagsToDescription,
  tagWriter,
} from '../../src/providers/dataplaneapi/tags.js';
import { TAG_KEY, TAG_VALUE } from '../../src/registry/registry.js';
import { PROPERTY_TIMEOUT_MS } from '../support/property.js';

const key = fc.stringMatching(TAG_KEY);
const value = fc.stringMatching(TAG_VALUE);

describe('tags in a description (Data Plane API v3.0/v3.1)', () => {
  it('round-trips every valid set of tags, owner first', { timeout: PROPERTY_TIMEOUT_MS }, () => {
    fc.assert(
      fc.property(fc.dictionary(key, value, { minKeys: 1, maxKeys: 4 }), (tags) => {
        const text = tagsToDescription(tags);
        expect(descriptionToTags(text)).toEqual(tags);
        expect(text).toMatch(/^kubebyon( [a-z][a-z0-9_]*=[A-Za-z0-9._-]+)+$/);
      }),
    );
    expect(tagsToDescription({ cluster: 'one', owner: 'me' })).toBe('kubebyon owner=me cluster=one');
  });

  it('refuses to write anything HAProxy would read otherwise (spaces, comments, quotes, line breaks)', () => {
    for (const bad of ['a b', 'a#b', 'a"b', 'a\nbackend x', "a'b", 'a\\b', ''])
      expect(() => tagsToDescription({ owner: bad })).toThrow(TerminalError);
    expect(() => tagsToDescription({ 'Bad-Key': 'x' })).toThrow(TerminalError);
    expect(() => tagsToDescription({})).toThrow(TerminalError);
  });

  it('reads tags only from the exact grammar: anything else is a description of someone else', () => {
    expect(descriptionToTags('kubebyon owner=me cluster=one')).toEqual({ owner: 'me', cluster: 'one' });
    for (const other of [
      'the console',
      'kubebyon',
      'kubebyon  owner=me',
      ' kubebyon owner=me',
      'kubebyon owner=me ',
      'kubebyon owner=me owner=you',
      'kubebyon owner=me # comment',
      'kubebyon owner',
      'Kubebyon owner=me',
      undefined,
      42,
    ])
      expect(descriptionToTags(other), String(other)).toEqual({});
  });

  it('prefers metadata over a description, and reads a description where there is no metadata', () => {
    expect(sectionTags({ metadata: { owner: { value: 'a' } }, description: 'kubebyon owner=b' })).toEqual({
      owner: 'a',
    });
    expect(sectionTags({ metadata: { note: 'x' }, description: 'kubebyon owner=b' })).toEqual({ owner: 'b' });
  });

  it('writes sections by the version’s mechanism, keeping what another tool stored beside the tags', () => {
    const described = tagWriter({ ownership: 'description', serverTags: true });
    expect(
      described.section({ description: 'kubebyon owner=me note=x' }, { owner: 'me', cluster: 'c' }),
    ).toEqual({
      description: 'kubebyon owner=me cluster=c note=x',
    });
    expect(described.child({ owner: 'me' })).toEqual({});
    expect(described.server({ owner: 'me' })).toEqual({ metadata: { owner: { value: 'me' } } });
    expect(tagWriter({ ownership: 'description', serverTags: false }).server({ owner: 'me' })).toEqual({});
    const meta = tagWriter({ ownership: 'metadata', serverTags: true });
    expect(
      meta.section({ metadata: { tool: { value: 'x' } }, description: 'kept' }, { owner: 'me' }),
    ).toEqual({
      metadata: { tool: { value: 'x' }, owner: { value: 'me' } },
      description: 'kept',
    });
    expect(meta.child({ owner: 'me' })).toEqual({ metadata: { owner: { value: 'me' } } });
  });
});
