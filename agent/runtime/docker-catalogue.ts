import Docker from 'dockerode';
import type { Catalogue } from '../catalogue.js';

/**
 * The docker lab's default catalogue: every local image built by scripts/build-mysql-image.sh
 * (label `fulcrum.image=mariadb`), under the server version it carries in
 * `org.opencontainers.image.version`, referenced by its series tag when it has one (so a
 * rebuilt image with a newer patch release is picked up by the same entry). Operators running
 * official images list them in their catalogue configuration instead.
 */
export async function detectDockerCatalogue(docker: Docker = new Docker({ socketPath: process.env.DOCKER_SOCKET ?? '/var/run/docker.sock' })): Promise<Catalogue> {
  const images = await docker.listImages({ filters: JSON.stringify({ label: ['fulcrum.image=mariadb'] }) });
  const out: Catalogue = [];
  const seen = new Set<string>();
  // Newest first: of two images with the same server version, the latest build wins.
  for (const img of [...images].sort((a, b) => b.Created - a.Created)) {
    // An image built FROM one of ours inherits its labels (the fulcrum/fulcrum image carries
    // fulcrum.image=mariadb with its own title and version): only the MariaDB images themselves,
    // whose version label is the server's, are engines.
    const title = img.Labels?.['org.opencontainers.image.title'];
    if (title !== undefined && title !== 'fulcrum-mariadb') continue;
    const version = img.Labels?.['org.opencontainers.image.version'];
    if (!version || seen.has(version)) continue;
    const tags = (img.RepoTags ?? []).filter((t) => t !== '<none>:<none>');
    if (tags.length === 0) continue;
    seen.add(version);
    const series = version.split('.').slice(0, 2).join('.');
    const image = tags.find((t) => t.endsWith(`:${series}`)) ?? tags.find((t) => t.endsWith(`:${version}`)) ?? tags[0]!;
    out.push({ id: `mysql/${version}`, engine: 'mysql', version, image });
  }
  return out.sort((a, b) => a.id.localeCompare(b.id));
}
