// A local ESLint rule: a database's persisted state (agent/database/state.ts, `DbState`) has one
// writer, the controller (docs/agent.md, "One writer"). Everywhere else in the agent the state is
// read, and a change goes through `updateState(db, { ... })` (agent/database/state.ts), which
// applies it to the state the controller holds and saves it.
//
// What counts as the state: a `.state` member (`c.state.x`, `c.state!.x`, `this.state.x`), a
// variable initialised from one (`const s = c.state!`), a variable named `state`, and a parameter
// typed `DbState`. What counts as writing it: an assignment (any operator), `++`/`--`, `delete`,
// `Object.assign(state, ...)` and the array methods that change the array in place.
//
// The controller's own inputs are its to keep too: `desired` is handed over with `setDesired`, the
// lock (`busy`), a credentials reset (`pendingPassword`) and the day-two hooks (`extras`) are
// never assigned from outside it.
const CONTROLLER_FIELDS = new Set(['desired', 'busy', 'pendingPassword', 'extras']);
const MUTATORS = new Set(['push', 'pop', 'shift', 'unshift', 'splice', 'sort', 'reverse', 'fill', 'copyWithin']);

function unwrap(node) {
  while (node && (node.type === 'TSNonNullExpression' || node.type === 'ChainExpression' || node.type === 'TSAsExpression')) node = node.expression;
  return node;
}

function isStateMember(node) {
  node = unwrap(node);
  return node?.type === 'MemberExpression' && !node.computed && node.property.type === 'Identifier' && node.property.name === 'state';
}

export default {
  meta: {
    type: 'problem',
    docs: { description: 'Only the database controller writes DbState.' },
    schema: [],
    messages: {
      write: 'DbState is written by the controller only: hand it the change (`updateState(db, { ... })`) instead.',
      field: 'The controller\'s `{{name}}` is set by the controller only (desired: `setDesired`).',
    },
  },
  create(context) {
    /** Names in this file bound to a state object. */
    const names = new Set(['state']);

    /** Whether `node` (an expression being written through) reaches into the state. */
    function intoState(node) {
      node = unwrap(node);
      while (node?.type === 'MemberExpression') {
        if (isStateMember(node)) return true;
        node = unwrap(node.object);
        if (node?.type === 'Identifier') return names.has(node.name);
        if (isStateMember(node)) return true;
      }
      return false;
    }
    const report = (node) => context.report({ node, messageId: 'write' });
    const typedDbState = (p) => p.typeAnnotation?.typeAnnotation?.type === 'TSTypeReference' && p.typeAnnotation.typeAnnotation.typeName?.name === 'DbState';

    return {
      VariableDeclarator(node) {
        if (node.id.type === 'Identifier' && node.init && isStateMember(node.init)) names.add(node.id.name);
      },
      'FunctionDeclaration, FunctionExpression, ArrowFunctionExpression'(node) {
        for (const p of node.params) if (p.type === 'Identifier' && typedDbState(p)) names.add(p.name);
      },
      AssignmentExpression(node) {
        if (intoState(node.left)) return report(node);
        const left = unwrap(node.left);
        if (left?.type === 'MemberExpression' && !left.computed && left.property.type === 'Identifier' && CONTROLLER_FIELDS.has(left.property.name)
          && unwrap(left.object)?.type !== 'ThisExpression') {
          context.report({ node, messageId: 'field', data: { name: left.property.name } });
        }
      },
      UpdateExpression(node) {
        if (intoState(node.argument)) report(node);
      },
      UnaryExpression(node) {
        if (node.operator === 'delete' && intoState(node.argument)) report(node);
      },
      CallExpression(node) {
        const callee = unwrap(node.callee);
        if (callee?.type !== 'MemberExpression' || callee.computed || callee.property.type !== 'Identifier') return;
        const obj = unwrap(callee.object);
        if (obj?.type === 'Identifier' && obj.name === 'Object' && callee.property.name === 'assign') {
          const target = unwrap(node.arguments[0]);
          if (target && (isStateMember(target) || (target.type === 'Identifier' && names.has(target.name)) || intoState(target))) report(node);
          return;
        }
        if (MUTATORS.has(callee.property.name) && intoState(callee.object)) report(node);
      },
    };
  },
};
