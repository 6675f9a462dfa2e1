import { useState } from 'preact/hooks';
import { canRead } from '../api.js';
import { newestEvents, type EventWire } from '../activity.js';
import { usePoll } from '../router.js';
import { ErrorBox, PageTitle, Status, useAccess, when } from '../ui.js';

export function EventsPage() {
  const access = useAccess();
  const [rows, setRows] = useState<EventWire[]>();
  const [err, setErr] = useState<unknown>();
  usePoll(async () => {
    if (!canRead(access, 'events')) return;
    try { setRows(await newestEvents(100)); setErr(undefined); } catch (e) { setErr(e); }
  }, 5_000);
  if (!canRead(access, 'events')) return <><PageTitle>Events</PageTitle><p>This token may not read events (it needs the events scope).</p></>;
  return (
    <>
      <PageTitle>Events</PageTitle>
      <p>The 100 newest events of the account, newest first, refreshed every 5 seconds.</p>
      <ErrorBox error={err} />
      {rows === undefined ? <p role="status">Loading…</p> : rows.length === 0 ? <p>No events yet.</p> : (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">Events</caption>
            <thead><tr><th scope="col">When</th><th scope="col">Action</th><th scope="col">Entity</th><th scope="col">Status</th><th scope="col">User</th><th scope="col">Message</th></tr></thead>
            <tbody>
              {rows.map((e) => (
                <tr key={e.id}>
                  <td>{when(e.created)}</td>
                  <th scope="row">{e.action}</th>
                  <td>{e.entity ? `${e.entity.type} ${e.entity.label}` : ''}</td>
                  <td><Status value={e.status} /></td>
                  <td>{e.username}</td>
                  <td>{e.message ?? ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
