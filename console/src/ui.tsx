import { createContext, type ComponentChildren } from 'preact';
import { useContext, useEffect, useRef, useState } from 'preact/hooks';
import type { Access } from './api.js';
import { BASE, navigate } from './router.js';

export const AccessContext = createContext<Access | undefined>(undefined);
export const useAccess = () => useContext(AccessContext);

export function Link(props: { to: string; children: ComponentChildren; class?: string; current?: boolean }) {
  return (
    <a
      href={BASE + props.to}
      class={props.class}
      aria-current={props.current ? 'page' : undefined}
      onClick={(e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        navigate(props.to);
      }}
    >
      {props.children}
    </a>
  );
}

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  return <p class="error" role="alert">{error instanceof Error ? error.message : String(error)}</p>;
}

/** A page's heading takes focus on arrival, so screen readers announce the new page. */
export function PageTitle({ children }: { children: ComponentChildren }) {
  const ref = useRef<HTMLHeadingElement>(null);
  useEffect(() => ref.current?.focus(), []);
  return <h1 tabIndex={-1} ref={ref}>{children}</h1>;
}

export function Status({ value }: { value: string }) {
  return <span class={`status status-${value.toLowerCase()}`}>{value}</span>;
}

export function Field(props: { label: string; id: string; children: ComponentChildren; hint?: string }) {
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.hint ? <small id={`${props.id}-hint`}>{props.hint}</small> : null}
    </div>
  );
}

/**
 * A button that asks first in a modal dialog naming what will happen (native <dialog>: focus
 * moves into it, Escape cancels, focus returns to the button).
 */
export function ConfirmButton(props: { label: string; question: string; confirm: string; onConfirm: () => Promise<void> | void; danger?: boolean }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<unknown>();
  return (
    <>
      <button type="button" class={props.danger ? 'danger' : undefined} onClick={() => { setErr(undefined); ref.current?.showModal(); }}>{props.label}</button>
      <dialog ref={ref} aria-labelledby={`${props.confirm}-q`.replace(/\W+/g, '-')}>
        <p id={`${props.confirm}-q`.replace(/\W+/g, '-')}>{props.question}</p>
        <ErrorBox error={err} />
        <div class="actions">
          <button type="button" onClick={() => ref.current?.close()}>Cancel</button>
          <button
            type="button"
            class={props.danger ? 'danger' : 'primary'}
            disabled={busy}
            onClick={async () => {
              setBusy(true);
              try {
                await props.onConfirm();
                ref.current?.close();
              } catch (e) {
                setErr(e);
              } finally {
                setBusy(false);
              }
            }}
          >
            {props.confirm}
          </button>
        </div>
      </dialog>
    </>
  );
}

// Toasts: short notices in a polite live region, each gone after a while.
export interface Toast { id: number; text: string; kind: 'ok' | 'fail' }
let toasts: Toast[] = [];
let nextToast = 1;
const toastListeners = new Set<(t: Toast[]) => void>();
export function toast(text: string, kind: Toast['kind'] = 'ok'): void {
  const t = { id: nextToast++, text, kind };
  toasts = [...toasts, t];
  toastListeners.forEach((l) => l(toasts));
  setTimeout(() => {
    toasts = toasts.filter((x) => x.id !== t.id);
    toastListeners.forEach((l) => l(toasts));
  }, 20_000);
}

export function Toasts() {
  const [list, setList] = useState<Toast[]>(toasts);
  useEffect(() => {
    toastListeners.add(setList);
    return () => void toastListeners.delete(setList);
  }, []);
  return (
    <div class="toasts" role="status" aria-live="polite">
      {list.map((t) => <p key={t.id} class={`toast toast-${t.kind}`}>{t.text}</p>)}
    </div>
  );
}

export function go(path: string): void {
  navigate(path);
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '';
  return new Date(`${iso}Z`).toLocaleString();
}
