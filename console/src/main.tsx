import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, loadAccess, session, type Access } from './api.js';
import { checkPending } from './activity.js';
import { navigate, usePath, usePoll } from './router.js';
import { AccessContext, Link, PageTitle, Toasts, ErrorBox } from './ui.js';
import { NodeBalancerList, NodeBalancerCreate } from './pages/nodebalancers.js';
import { NodeBalancerDetail } from './pages/nodebalancer-detail.js';
import { DatabaseList, DatabaseCreate } from './pages/databases.js';
import { DatabaseDetail } from './pages/database-detail.js';
import { EventsPage } from './pages/events.js';
import { FleetPage } from './pages/fleet.js';
import 'uplot/dist/uPlot.min.css';
import './styles.css';

session.adoptFragment();

function SignIn(props: { message?: string; onSignedIn: () => void }) {
  const [token, setToken] = useState('');
  const [err, setErr] = useState<unknown>();
  return (
    <main id="main" class="signin">
      <PageTitle>Sign in to Fulcrum</PageTitle>
      {props.message ? <p class="error" role="alert">{props.message}</p> : null}
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          session.set(token);
          try {
            await loadAccess();
            props.onSignedIn();
          } catch (x) {
            session.clear();
            setErr(x instanceof ApiError && x.status === 401 ? new Error('That token was refused: check that it is complete and not expired or revoked.') : x);
          }
        }}
      >
        <div class="field">
          <label for="token">API token</label>
          <input id="token" name="token" type="password" autoComplete="off" required value={token} onInput={(e) => setToken(e.currentTarget.value)} aria-describedby="token-hint" />
          <small id="token-hint">A personal access token for this Fulcrum API. It is kept only in this tab's session storage.</small>
        </div>
        <ErrorBox error={err} />
        <button class="primary" type="submit">Sign in</button>
      </form>
    </main>
  );
}

const nav = [
  ['/nodebalancers', 'NodeBalancers'],
  ['/databases', 'Databases'],
  ['/events', 'Events'],
  ['/fleet', 'Fleet'],
] as const;

function Routes({ path }: { path: string }) {
  let m: RegExpExecArray | null;
  if (path === '/' || path === '/nodebalancers') return <NodeBalancerList />;
  if (path === '/nodebalancers/create') return <NodeBalancerCreate />;
  if ((m = /^\/nodebalancers\/(\d+)$/.exec(path))) return <NodeBalancerDetail id={Number(m[1])} />;
  if (path === '/databases') return <DatabaseList />;
  if (path === '/databases/create') return <DatabaseCreate />;
  if ((m = /^\/databases\/(\d+)$/.exec(path))) return <DatabaseDetail id={Number(m[1])} />;
  if (path === '/events') return <EventsPage />;
  if (path === '/fleet') return <FleetPage />;
  return (
    <>
      <PageTitle>Page not found</PageTitle>
      <p>There is no console page at this address. <Link to="/nodebalancers">Go to NodeBalancers</Link>.</p>
    </>
  );
}

function App() {
  const path = usePath();
  const [access, setAccess] = useState<Access>();
  const [signedOut, setSignedOut] = useState<string | undefined>(session.token() ? undefined : '');
  const [loadErr, setLoadErr] = useState<unknown>();

  const load = () => loadAccess().then((a) => { setAccess(a); setSignedOut(undefined); }, (e) => { if (!(e instanceof ApiError && e.status === 401)) setLoadErr(e); });
  useEffect(() => session.onUnauthorized(() => {
    session.clear();
    setAccess(undefined);
    setSignedOut('The API refused your token (401 Unauthorized): it may have expired or been revoked. Sign in again with a valid token.');
  }), []);
  useEffect(() => { if (session.token()) void load(); }, []);
  // The lab's link opened in a tab already showing the console changes only the fragment.
  useEffect(() => {
    const on = () => { if (session.adoptFragment()) void load(); };
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  usePoll(async () => { if (access) await checkPending().catch(() => undefined); }, 4_000, [access]);

  if (signedOut !== undefined) return <><SignIn message={signedOut || undefined} onSignedIn={() => void load()} /><Toasts /></>;
  if (!access) return <main id="main"><ErrorBox error={loadErr} />{loadErr ? null : <p role="status">Loading…</p>}</main>;
  const section = '/' + (path.split('/')[1] || 'nodebalancers');
  return (
    <AccessContext.Provider value={access}>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <span class="brand">Fulcrum</span>
        <nav aria-label="Main">
          <ul>
            {nav.map(([to, label]) => <li key={to}><Link to={to} current={section === to}>{label}</Link></li>)}
          </ul>
        </nav>
        <button type="button" class="signout" onClick={() => { session.clear(); setAccess(undefined); setSignedOut(''); navigate('/'); }}>Sign out</button>
      </header>
      <main id="main">
        <Routes path={path} />
      </main>
      <Toasts />
    </AccessContext.Provider>
  );
}

render(<App />, document.getElementById('app')!);
