/**
 * The object store as a transcoding worker reaches it: every request and its reply cross the worker's
 * {@link NetworkLink}, so a partition holds uploads in flight (the zombie upload of the demo).
 */
import type { NetworkLink } from '../shared/network-link.js';
import type { ObjectStore, StoreClient, StoredObject } from './object-store.js';

/** Options of {@link linkStore}. */
export interface LinkStoreOptions {
  /** Recorded as the writer of every upload. */
  readonly writer: string;
  /** Called as an upload leaves the worker, before it crosses the link (fault injection may cut it here). */
  readonly onUpload?: (upload: { key: string; token: bigint; writer: string }) => void;
}

/** The object store as a worker behind `link` reaches it. */
export function linkStore(store: ObjectStore, link: NetworkLink, options: LinkStoreOptions): StoreClient {
  const across = async <T>(request: () => Promise<T>): Promise<T> => {
    await link.passage();
    try {
      return await request();
    } finally {
      await link.passage();
    }
  };
  return {
    get: (key: string): Promise<StoredObject | undefined> => across(() => store.get(key)),
    put(key: string, file: string, token: bigint): Promise<StoredObject> {
      options.onUpload?.({ key, token, writer: options.writer });
      return across(() => store.put(key, file, token, options.writer));
    },
  };
}
