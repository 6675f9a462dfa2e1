import type Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { detectDockerCatalogue } from '../../../agent/runtime/docker-catalogue.js';
import { resolveEngine, type Catalogue } from '../../../agent/catalogue.js';
import { EngineCatalogue } from '../../../control-plane/domain/databases/catalogue.js';

describe('engine catalogues: the operator chooses the software (docs/security/secrets.md)', () => {
  const local: Catalogue = [
    { id: 'mysql/10.11.9', engine: 'mysql', version: '10.11.9', binary: '/usr/sbin/mariadbd' },
    { id: 'mysql/10.11.9', engine: 'mysql', version: '10.11.9', image: 'fulcrum/mariadb:10.11' },
  ];

  it('an agent resolves only binaries and images its own catalogue lists for the engine id', () => {
    expect(resolveEngine(local, { engineId: 'mysql/10.11.9' }, 'process').binary).toBe('/usr/sbin/mariadbd');
    expect(resolveEngine(local, { engineId: 'mysql/10.11.9', binary: '/usr/sbin/mariadbd' }, 'process').binary).toBe('/usr/sbin/mariadbd');
    expect(() => resolveEngine(local, { engineId: 'mysql/10.11.9', binary: '/bin/sh' }, 'process')).toThrow(/binary \/bin\/sh is not in this agent's catalogue/);
    expect(resolveEngine(local, { engineId: 'mysql/10.11.9' }, 'docker').image).toBe('fulcrum/mariadb:10.11');
    expect(() => resolveEngine(local, { engineId: 'mysql/10.11.9', image: 'evil/image' }, 'docker')).toThrow(/image evil\/image is not in this agent's catalogue/);
    expect(() => resolveEngine(local, { engineId: 'mysql/9.9.9', image: 'fulcrum/mariadb:10.11' }, 'docker')).toThrow(/not in this agent's catalogue/);
  });

  it('the control plane takes engine ids from agents, never an image or binary; the operator file replaces everything', () => {
    const detected = [{ id: 'mysql/10.11.9', engine: 'mysql' as const, version: '10.11.9', image: '', binary: '/usr/sbin/mariadbd' }];
    let configured: ReturnType<EngineCatalogue['list']> = [];
    const c = new EngineCatalogue(() => configured, detected, () => ['mysql/10.11.9', 'mysql/11.4.2', 'not-an-id']);
    expect(c.list()).toEqual([
      detected[0],
      { id: 'mysql/11.4.2', engine: 'mysql', version: '11.4.2', image: '', binary: '' },
    ]);
    configured = [{ id: 'mysql/10.11.9', engine: 'mysql', version: '10.11.9', image: 'ops/mariadb:1', binary: '' }];
    expect(c.list()).toEqual(configured);
  });

  it('finds the engine a client version names: the exact build, or the newest build of a series', () => {
    const c = new EngineCatalogue(() => [], [], () => ['mysql/10.11.9', 'mysql/11.8.2', 'mysql/11.8.10', 'mysql/11.80.1']);
    expect(c.forVersion('10.11.9')?.id).toBe('mysql/10.11.9');
    expect(c.forVersion('11.8')?.id).toBe('mysql/11.8.10');
    expect(c.forVersion('11')?.id).toBe('mysql/11.80.1');
    expect(c.forVersion('11.4')).toBeUndefined();
    expect(c.forVersion('10.11.1')).toBeUndefined();
  });

  it('the docker lab catalogue takes the MariaDB images, not images built from them', async () => {
    const image = (tags: string[], labels: Record<string, string>, created: number) => ({ RepoTags: tags, Labels: { 'fulcrum.image': 'mariadb', ...labels }, Created: created });
    const images = [
      image(['fulcrum/mariadb:10.11', 'fulcrum/mariadb:10.11.18'], { 'org.opencontainers.image.title': 'fulcrum-mariadb', 'org.opencontainers.image.version': '10.11.18' }, 1),
      image(['fulcrum/mariadb:11.8', 'fulcrum/mariadb:11.8.9'], { 'org.opencontainers.image.title': 'fulcrum-mariadb', 'org.opencontainers.image.version': '11.8.9' }, 2),
      // The fulcrum/fulcrum image, FROM fulcrum/mariadb:10.11: inherits fulcrum.image=mariadb.
      image(['fulcrum/fulcrum:0.1.0'], { 'org.opencontainers.image.title': 'fulcrum', 'org.opencontainers.image.version': '0.1.0' }, 3),
    ];
    const docker = { listImages: async () => images } as unknown as Docker;
    expect(await detectDockerCatalogue(docker)).toEqual([
      { id: 'mysql/10.11.18', engine: 'mysql', version: '10.11.18', image: 'fulcrum/mariadb:10.11' },
      { id: 'mysql/11.8.9', engine: 'mysql', version: '11.8.9', image: 'fulcrum/mariadb:11.8' },
    ]);
  });
});
