import { describe, expect, it } from 'vitest';
import { ESLint } from 'eslint';
import { repoRoot } from '../helpers/lab.js';

// The three processes talk only over gRPC; the lint rule is what keeps them honest.
describe('lint: process boundaries', () => {
  const eslint = new ESLint({ cwd: repoRoot });
  const lint = async (file: string, code: string) => {
    const [r] = await eslint.lintText(code, { filePath: `${repoRoot}/${file}` });
    return r!.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
  };

  it.each([
    ['dataplane/x.ts', "import { startControlPlane } from '../control-plane/main.js';\nexport const x = startControlPlane;\n"],
    ['dataplane/x.ts', "import { startAgent } from '../agent/main.js';\nexport const x = startAgent;\n"],
    ['agent/x.ts', "import { startDataplane } from '../dataplane/main.js';\nexport const x = startDataplane;\n"],
    ['control-plane/api/x.ts', "import { createProxyEngine } from '../../dataplane/engine.js';\nexport const x = createProxyEngine;\n"],
    ['lib/x.ts', "import { startAgent } from '../agent/main.js';\nexport const x = startAgent;\n"],
  ])('%s may not import another process', async (file, code) => {
    expect((await lint(file, code)).length).toBe(1);
  });

  it('allows lib/ and proto/ imports', async () => {
    expect(await lint('dataplane/x.ts', "import { FulcrumError } from '../lib/errors.js';\nexport const x = FulcrumError;\n")).toEqual([]);
  });
});
