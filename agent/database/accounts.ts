import { syncAdminAccounts } from '../mysql/accounts.js';
import { withAdmin } from '../mysql/admin.js';
import type { ClusterContext } from './context.js';
import { accountsKey, updateState } from './state.js';

export type AccountsContext = Pick<ClusterContext, 'spec' | 'state' | 'adminTarget' | 'linrootPassword' | 'save'>;

/**
 * Makes linroot mirror the allow_list with the current password, on the primary (the replicas
 * follow through the binlog), and records what was applied so the next observation can tell
 * whether the accounts are current (docs/agent.md §4).
 */
export async function syncAccounts(db: AccountsContext): Promise<void> {
  const allowList = db.spec.allowList;
  const password = db.linrootPassword();
  await withAdmin(await db.adminTarget(db.state.primary), (c) => syncAdminAccounts(c, allowList, password));
  await updateState(db, { accountsKey: accountsKey(allowList, password) });
}
