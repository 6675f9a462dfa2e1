import { useEffect, useState } from 'preact/hooks';

/** Client-side routes under /console/ (the server answers the app for every such path). */
export const BASE = '/console';

export function navigate(path: string): void {
  history.pushState(null, '', BASE + path);
  dispatchEvent(new PopStateEvent('popstate'));
}

export function currentPath(): string {
  const p = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : location.pathname;
  return p === '' ? '/' : p;
}

export function usePath(): string {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const on = () => setPath(currentPath());
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return path;
}

/** Runs `fn` now and every `ms` while the component is shown; `deps` restart it. */
export function usePoll(fn: () => void | Promise<void>, ms: number, deps: unknown[] = []): void {
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const tick = async () => {
      try {
        await fn();
      } finally {
        if (!stopped) timer = setTimeout(tick, ms);
      }
    };
    void tick();
    return () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    };
  }, deps);
}
