// A local ESLint rule: a database's persisted state (agent/database/state.ts, `DbState`) has one
// writer, the controller (docs/agent.md, "One writer"). Everywhere else in the agent the state is
// read, and a change is handed to the controller as a patch (`update({...})`), which applies it.
//
// What counts as the state: a `.state` member (`c.state.x`, `c.state!.x`, `this.state.x`), a
// variable initialised from one (`const s = c.state!`), a variable named `state`, and a parameter
// typed `DbState`. What counts as writing it: an assignment (any operator), `++`/`--`, `delete`,
// `Object.assign(state, ...)` and the array methods that change the array in place.
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
    messages: { write: 'DbState is written by the controller only: hand it the change (`update({ ... })`) instead.' },
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
        if (intoState(node.left)) report(node);
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
