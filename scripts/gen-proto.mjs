// Generates TypeScript types for proto/fulcrum/v1/*.proto into proto/gen.
// The .proto files are loaded at run time by @grpc/proto-loader; the generated
// types only give the code compile-time shapes. Never edit proto/gen by hand.
import { execFileSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'proto', 'fulcrum', 'v1');
const files = readdirSync(dir).filter((f) => f.endsWith('.proto')).map((f) => join('fulcrum', 'v1', f));
rmSync(join(root, 'proto', 'gen'), { recursive: true, force: true });
execFileSync(
  join(root, 'node_modules', '.bin', 'proto-loader-gen-types'),
  [...files, '--longs=Number', '--enums=String', '--defaults', '--oneofs', '--grpcLib=@grpc/grpc-js',
   '--importFileExtension=.js', '--outDir=proto/gen', '--includeDirs=proto'],
  { cwd: root, stdio: 'inherit' },
);
