/**
 * Route matching: a route takes a request by its method and its path. A path pattern is literal except
 * for whole segments: `:name` or `*` matches one segment, a final `**` the rest of the path (one or more
 * segments). The first route in the configuration's order that matches wins.
 *
 * @module
 */

/**
 * The regular expression of a path pattern.
 *
 * @throws TypeError when `**` is not the last segment or the pattern does not start with `/`
 */
export function pathPattern(pattern: string): RegExp {
  if (!pattern.startsWith('/')) throw new TypeError(`retrysafe: route path ${JSON.stringify(pattern)} must start with "/"`);
  const segments = pattern.slice(1).split('/');
  const parts = segments.map((segment, index) => {
    if (segment === '**') {
      if (index !== segments.length - 1) throw new TypeError(`retrysafe: in route path ${JSON.stringify(pattern)}, "**" must be the last segment`);
      return '.+';
    }
    if (segment === '*' || segment.startsWith(':')) return '[^/]+';
    return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  });
  return new RegExp(`^/${parts.join('/')}$`);
}
