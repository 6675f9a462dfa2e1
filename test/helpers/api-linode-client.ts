import type { AxiosInstance, InternalAxiosRequestConfig } from 'axios';
import * as sdkModule from '@linode/api-v4';
import { assertResponseSchema } from './api-schema.js';

/**
 * Points the real @linode/api-v4 client at our server, the way its README describes: an axios
 * request interceptor on the exported `baseRequest` (imported from the same module path as the
 * SDK functions) rewrites https://api.linode.com to our URL and sets the bearer token. A
 * response interceptor checks every body the SDK receives against the official schema.
 * `token()` is read per request so that one test can switch between users.
 */
// The package's .d.ts re-exports extension-less paths, which NodeNext resolution cannot follow,
// so its functions are typed loosely here; at run time this is the package's own ESM entry.
type SdkFn = (...args: any[]) => Promise<any>;
export const sdk = sdkModule as unknown as Record<string, SdkFn>;
/** The SDK's axios instance, from the same module path as the functions (its README's rule). */
export const baseRequest = (sdkModule as unknown as { baseRequest: AxiosInstance }).baseRequest;

export function pointLinodeClientAt(apiUrl: string, token: () => string | null): () => void {
  const reqId = baseRequest.interceptors.request.use((config: InternalAxiosRequestConfig) => {
    if (config.url) config.url = config.url.replace('https://api.linode.com', apiUrl);
    const t = token();
    if (t !== null) config.headers.set('Authorization', `Bearer ${t}`);
    else config.headers.delete('Authorization');
    return config;
  });
  const check = (r: { status: number; data: unknown; headers: any; config: { method?: string; url?: string } }) => {
    const ct = typeof r.headers?.get === 'function' ? r.headers.get('content-type') : r.headers?.['content-type'];
    if (ct !== 'application/json') throw new Error(`${r.config.method} ${r.config.url}: Content-Type ${ct}`);
    assertResponseSchema(r.config.method ?? 'get', r.config.url ?? '', r.status, r.data);
  };
  const resId = baseRequest.interceptors.response.use(
    (r: any) => {
      check(r);
      return r;
    },
    (err: any) => {
      if (err?.response) check(err.response);
      return Promise.reject(err);
    },
  );
  return () => {
    baseRequest.interceptors.request.eject(reqId);
    baseRequest.interceptors.response.eject(resId);
  };
}

/** The API errors of a rejected SDK call: client-side validation rejects with APIError[] directly. */
export async function apiErrors(p: Promise<unknown>): Promise<{ status: number | undefined; errors: { field?: string; reason: string }[] }> {
  try {
    await p;
  } catch (e: any) {
    if (Array.isArray(e)) return { status: undefined, errors: e };
    if (e?.response) return { status: e.response.status, errors: e.response.data?.errors ?? [] };
    throw e;
  }
  throw new Error('expected the call to fail');
}
