/**
 * Turning an Express request or response into a dictionary before properties are added to it: shared by
 * the Express middleware and the NestJS module's early middleware on `@nestjs/platform-express`.
 *
 * @module
 */

/** The key of the property {@link toDictionaryMode} adds and deletes. */
const SCRATCH = Symbol('retrysafe.scratch');

// Hot path: docs/hot-path.md#express-dictionary-mode
/**
 * Makes `target` keep its properties in a dictionary (V8's slow mode) by adding a property and deleting
 * it. Express sets the prototype of every request and response (`Object.setPrototypeOf`), after which V8
 * gives the object a map of its own: each property added from then on (the hold's four stand-in writers,
 * `rawBody`, `idempotency`, and the router's and the body parser's own) copies that map and moves every
 * field, and the hold's first delete turns the object into a dictionary anyway. A dictionary from the
 * start, each is a hash insert. On an object whose map is shared, the delete just undoes the add.
 */
export function toDictionaryMode(target: object): void {
  const scratch = target as Record<symbol, unknown>;
  scratch[SCRATCH] = undefined;
  delete scratch[SCRATCH];
}
