/**
 * Controller options that name Kubernetes objects: `namespace/name` and
 * `namespace/name:port`.
 *
 * Owns parsing those strings. Knows nothing about what the objects are for.
 *
 * @module
 */

/** A parsed `namespace/name[:port]`. */
export interface ObjectRefOption {
  readonly namespace: string;
  readonly name: string;
  /** Present only when the form with a port was used: a number, or a port name. */
  readonly port?: number | string;
}

const NAME = "[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?";
const WITH_PORT = new RegExp(`^(${NAME})/(${NAME})(?::([0-9]+|[a-z0-9](?:[-a-z0-9]*[a-z0-9])?))?$`);

/**
 * Parses `namespace/name`, or `namespace/name:port` when `allowPort`; returns
 * `undefined` for anything else.
 */
export function parseObjectRefOption(
  value: string,
  options: { readonly allowPort?: boolean } = {},
): ObjectRefOption | undefined {
  const match = WITH_PORT.exec(value);
  if (match === null) return undefined;
  const [, namespace, name, port] = match;
  if (namespace === undefined || name === undefined) return undefined;
  if (port === undefined) return { namespace, name };
  if (options.allowPort !== true) return undefined;
  if (/^[0-9]+$/.test(port)) {
    const number = Number(port);
    return number >= 1 && number <= 65535 ? { namespace, name, port: number } : undefined;
  }
  return { namespace, name, port };
}
