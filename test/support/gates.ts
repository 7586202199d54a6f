/** A gate: a promise that holds work until the test opens it. */
export interface Gate {
  readonly opened: Promise<void>;
  open(this: void): void;
}

/** Gates that hold work until a test opens them, every one of them opened by `openAll` (after each test, so a failed test never leaves a transaction open). */
export function trackedGates(): { readonly gate: (this: void) => Gate; readonly openAll: (this: void) => void } {
  const made: (() => void)[] = [];
  const gate = (): Gate => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => {
      open = resolve;
    });
    made.push(open);
    return { opened, open };
  };
  const openAll = (): void => {
    for (const open of made.splice(0)) open();
  };
  return { gate, openAll };
}
